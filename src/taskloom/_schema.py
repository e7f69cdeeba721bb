"""A small structural JSON-schema check, for schemas written by hand.

Tools built with `@tool` and agents with a pydantic output type validate
with pydantic; a hand-written `Tool` or a dict `output_type` gets this:
`type`, `enum`, `required`, `properties`, `additionalProperties: false` and
`items`, recursively — enough to tell a model exactly what was wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def _is_type(value: Any, names: list[str]) -> bool:
    allowed = tuple(t for n in names for t in _TYPES.get(n, (object,)))
    # bool is an int in Python, but not a JSON integer or number.
    if isinstance(value, bool):
        return bool in allowed or object in allowed
    return isinstance(value, allowed)


def check(value: Any, schema: Mapping[str, Any], path: str = "$") -> None:
    """Raise `ValueError` naming the first place `value` breaks `schema`."""
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not _is_type(value, names):
            raise ValueError(f"{path}: expected {' or '.join(names)}")
    if "enum" in schema and value not in schema["enum"]:
        raise ValueError(f"{path}: must be one of {schema['enum']}")
    if isinstance(value, dict):
        missing = [k for k in schema.get("required", ()) if k not in value]
        if missing:
            raise ValueError(
                f"{path}: missing required propert{'y' if len(missing) == 1 else 'ies'} {', '.join(map(repr, missing))}"
            )
        props: Mapping[str, Any] = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            extra = [k for k in value if k not in props]
            if extra:
                raise ValueError(
                    f"{path}: unexpected propert{'y' if len(extra) == 1 else 'ies'} {', '.join(map(repr, extra))}"
                )
        for key, sub in props.items():
            if key in value and isinstance(sub, Mapping):
                check(value[key], sub, f"{path}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            check(item, schema["items"], f"{path}[{i}]")
