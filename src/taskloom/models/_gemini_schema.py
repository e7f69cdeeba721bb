"""JSON schemas as Gemini takes them (`parametersJsonSchema`, `responseJsonSchema`).

Gemini reads a subset of JSON Schema (the fields of its own `Schema`);
`gemini_schema` maps a schema onto it keyword by keyword:

- kept: what Gemini has a field for;
- renamed: `oneOf` to `anyOf`, `const` to a one-value `enum`, `definitions`
  to `$defs`; an `allOf` of one schema is merged into its parent;
- dropped: annotations and constraints Gemini has no field for: that only
  loosens the schema, and taskloom validates arguments and output against
  the full one anyway;
- refused with `ConfigurationError` naming the place: what would change the
  meaning (an `allOf` of several schemas, a `$ref` outside the schema, an
  `enum` of objects, an unknown type, a `false` schema, tool parameters that
  are not an object, a tool name Gemini does not accept).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError

_KEPT = frozenset(
    {
        "$id",
        "$anchor",
        "type",
        "format",
        "title",
        "description",
        "required",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minProperties",
        "maxProperties",
        "nullable",
        "default",
        "example",
        "propertyOrdering",
    }
)
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions"})
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "prefixItems"})
_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})

_API_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")
_VERTEX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def function_name(name: str, *, vertex: bool) -> str:
    """`name` when Gemini accepts it as a function name, else `ConfigurationError`."""
    pattern = _VERTEX_NAME if vertex else _API_NAME
    if pattern.fullmatch(name):
        return name
    allowed = "letters, digits, '_', '.' and '-'" + ("" if vertex else " and ':'")
    raise ConfigurationError(
        f"tool name {name!r} cannot be a Gemini function name: it must start with a "
        f"letter or '_' and hold only {allowed}, 64 characters at most"
    )


def tool_parameters(name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's input schema as `parametersJsonSchema`: an object, always."""
    where = f"tool {name!r}: parameters"
    mapped = gemini_schema(schema, where)
    if not mapped:
        return {"type": "object", "properties": {}}
    kind = mapped.get("type")
    if kind is None and "properties" in mapped:
        mapped = {"type": "object", **mapped}
    elif kind != "object":
        what = "a schema without a type" if kind is None else f"type {kind!r}"
        raise ConfigurationError(
            f"{where}: Gemini takes a function's parameters as an object schema, not {what}"
        )
    return mapped


def _subschema(value: Any, where: str) -> dict[str, Any]:
    if value is True:
        return {}
    if value is False:
        raise ConfigurationError(f"{where}: Gemini has no schema that matches nothing (false)")
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where}: a schema must be an object, not {value!r:.60}")
    return gemini_schema(value, where)


def gemini_schema(schema: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`schema` mapped onto what Gemini reads; `where` names it in errors."""
    out: dict[str, Any] = {}
    member: dict[str, Any] | None = None
    for key, value in schema.items():
        at = f"{where}.{key}"
        if key in _KEPT:
            if key == "type":
                _check_type(value, at)
            out[key] = value
        elif key in _SCHEMA_MAPS:
            if not isinstance(value, Mapping):
                raise ConfigurationError(f"{at}: expected an object of schemas")
            target = "$defs" if key == "definitions" else key
            mapped = {name: _subschema(s, f"{at}.{name}") for name, s in value.items()}
            out[target] = {**out.get(target, {}), **mapped}
        elif key in _SCHEMA_LISTS:
            if not isinstance(value, list):
                raise ConfigurationError(f"{at}: expected a list of schemas")
            target = "anyOf" if key == "oneOf" else key
            if target in out:
                raise ConfigurationError(f"{where}: Gemini cannot take both anyOf and oneOf here")
            out[target] = [_subschema(s, f"{at}[{i}]") for i, s in enumerate(value)]
        elif key == "items":
            # `items: false` after `prefixItems` (a closed tuple) only forbids
            # extra items: dropping it loosens.
            if not isinstance(value, bool):
                out[key] = _subschema(value, at)
        elif key == "additionalProperties":
            out[key] = value if isinstance(value, bool) else _subschema(value, at)
        elif key == "$ref":
            out[key] = _reference(value, at)
        elif key == "enum":
            out[key] = _enum(value, at)
        elif key == "const":
            out.setdefault("enum", _enum([value], at))
        elif key == "allOf":
            member = _all_of(value, at)
        # Anything else is an annotation or a constraint Gemini has no field
        # for: dropping it only loosens what the schema allows.
    if member is not None:
        _merge(out, member, where)
    return out


def _check_type(value: Any, where: str) -> None:
    kinds = value if isinstance(value, list) else [value]
    unknown = [k for k in kinds if k not in _TYPES]
    if unknown or not kinds:
        raise ConfigurationError(
            f"{where}: {unknown[0] if unknown else value!r} is not a JSON Schema type "
            f"(one of {', '.join(sorted(_TYPES))})"
        )


def _reference(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.startswith("#"):
        raise ConfigurationError(
            f"{where}: Gemini resolves only references inside the schema (#/$defs/...), "
            f"not {value!r:.80}"
        )
    if value.startswith("#/definitions/"):
        return "#/$defs/" + value[len("#/definitions/") :]
    return value


def _enum(values: Any, where: str) -> list[Any]:
    if not isinstance(values, list):
        raise ConfigurationError(f"{where}: an enum is a list of values")
    for value in values:
        if isinstance(value, Mapping | list):
            raise ConfigurationError(
                f"{where}: Gemini enums hold strings and numbers, not {value!r:.60}"
            )
    return values


def _all_of(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, list) or len(value) != 1:
        raise ConfigurationError(
            f"{where}: Gemini has no allOf; one schema in it can be merged into its "
            f"parent, but not {len(value) if isinstance(value, list) else value!r}"
        )
    return _subschema(value[0], f"{where}[0]")


def _merge(out: dict[str, Any], member: Mapping[str, Any], where: str) -> None:
    for key, value in member.items():
        if key in out and out[key] != value and key not in ("title", "description"):
            raise ConfigurationError(
                f"{where}.allOf: its {key!r} differs from the schema's own; "
                "Gemini has no allOf to hold both"
            )
        # The parent's own title and description win over the member's.
        out.setdefault(key, value)
