"""Tool signatures of plain scalars, served without pydantic until it is needed.

Most tools take strings, numbers and flags. For those, `@tool` writes the
JSON schema pydantic would write, and a call whose arguments already have
their declared types (the model's usual answer) is checked here; anything
else (a missing or extra argument, a "3" for an int) goes to the pydantic
model, built on its first such call, so coercions and error messages are
exactly pydantic's. A process whose tools are all plain never imports
pydantic, the largest part of a cold start.

The same goes for docstrings: one with no sections (no `:`, no `@`, no
underlined heading) is its own description, which is what `docstring_parser`
would make of it, without importing it.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pydantic

_JSON_TYPES: Mapping[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}

_DEFAULT_TYPES = (str, int, float, bool, type(None))

# Names pydantic will not take as fields quietly (BaseModel's own attributes,
# some deprecated, warn as shadowed); such a tool keeps the pydantic path, so
# its warning or error comes at decoration as before. A test checks this
# covers the installed pydantic's public BaseModel attributes.
_BASEMODEL_NAMES = frozenset(
    {
        "construct",
        "copy",
        "dict",
        "from_orm",
        "json",
        "parse_file",
        "parse_obj",
        "parse_raw",
        "schema",
        "schema_json",
        "update_forward_refs",
        "validate",
    }
)

_MISSING = object()


def plain_name(name: str) -> bool:
    """Whether pydantic takes `name` as a field with no warning or error."""
    return not name.startswith(("_", "model_")) and name not in _BASEMODEL_NAMES


def scalar_of(annotation: Any) -> tuple[type, bool] | None:
    """`(T, nullable)` when `annotation` is str, int, float or bool, or one of
    them `| None` (`Optional[T]`); None for anything else."""
    if type(annotation) is type:
        return (annotation, False) if annotation in _JSON_TYPES else None
    origin = typing.get_origin(annotation)
    if origin is not typing.Union and origin is not types.UnionType:
        return None
    args = typing.get_args(annotation)
    # `T | None` only: pydantic lists a union's schemas in its order.
    if len(args) != 2 or args[1] is not type(None):
        return None
    inner = args[0]
    return (inner, True) if type(inner) is type and inner in _JSON_TYPES else None


def plain_default(default: Any) -> bool:
    """Whether pydantic's schema shows `default` as it is (a finite JSON scalar)."""
    if type(default) not in _DEFAULT_TYPES:
        return False
    return type(default) is not float or math.isfinite(default)


class SimpleArguments:
    """The arguments of a tool whose parameters are all plain scalars.

    `fields` are `(name, type, nullable, default or _MISSING, description or
    None)` in signature order; `build_model` makes the pydantic model the
    tool would otherwise have, called at most once, on the first arguments
    this cannot take as they are.
    """

    __slots__ = ("_build", "_fields", "_model", "_names", "schema")

    def __init__(
        self,
        fields: list[tuple[str, type, bool, Any, str | None]],
        build_model: Callable[[], type[pydantic.BaseModel]],
    ) -> None:
        self._fields = tuple(field[:4] for field in fields)
        self._names = frozenset(name for name, *_ in fields)
        self._build = build_model
        self._model: type[pydantic.BaseModel] | None = None
        self.schema = _schema(fields)

    def check(self, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
        """The keyword arguments, in signature order with defaults filled, when
        every argument is declared and already of its type (a bool is not an
        int, an int not a float: pydantic would convert those); None otherwise."""
        if not self._names.issuperset(arguments):
            return None
        out: dict[str, Any] = {}
        for name, kind, nullable, default in self._fields:
            value = arguments.get(name, _MISSING)
            if value is _MISSING:
                if default is _MISSING:
                    return None
                value = default
            elif type(value) is not kind and not (nullable and value is None):
                return None
            out[name] = value
        return out

    def model(self) -> type[pydantic.BaseModel]:
        """The pydantic model, built on first use."""
        if self._model is None:
            self._model = self._build()
        return self._model


def _schema(fields: list[tuple[str, type, bool, Any, str | None]]) -> dict[str, Any]:
    # Keys sorted as pydantic's JSON schema sorts them.
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, kind, nullable, default, description in fields:
        prop: dict[str, Any] = {}
        if nullable:
            prop["anyOf"] = [{"type": _JSON_TYPES[kind]}, {"type": "null"}]
        if default is _MISSING:
            required.append(name)
        else:
            prop["default"] = default
        if description is not None:
            prop["description"] = description
        if not nullable:
            prop["type"] = _JSON_TYPES[kind]
        properties[name] = prop
    schema: dict[str, Any] = {"additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    schema["type"] = "object"
    return schema


def plain_docstring(doc: str) -> str | None:
    """The description of a cleaned docstring with no sections, as
    `docstring_parser` gives it; None when it may have sections."""
    if ":" in doc or "@" in doc:
        return None
    lines = doc.split("\n")
    if any(line.strip() and not line.strip().strip("-=~") for line in lines):
        return None  # an underlined heading (NumPy style)
    short, _, rest = doc.partition("\n")
    return "\n\n".join(part for part in (short, rest.strip()) if part).strip()


MISSING = _MISSING
"""The default of a parameter that has none."""
