"""`@tool`: a function's signature and docstring made into a `Tool`.

The JSON schema comes from the signature (pydantic, or `_simple` for
plain scalars) and the description from the docstring, both built once at
decoration. A parameter annotated
`ToolContext` is injected and left out of the schema; positional-only
parameters (before `/`) are not the model's either: `Tool.partial` fills
them. What leaves the model guessing (an untyped parameter, no description)
is a `ToolDefinitionWarning` at the function's line.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
import typing
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, overload

from ..errors import ConfigurationError, ToolDefinitionWarning
from ._output import DEFAULT_MAX_OUTPUT_CHARS
from ._simple import (
    MISSING,
    SimpleArguments,
    plain_default,
    plain_docstring,
    plain_name,
    scalar_of,
)
from ._tool import ApprovalRule, Tool, ToolEffect

if TYPE_CHECKING:
    import pydantic

# A parameter: its annotation, its default (`...` if none) and its
# description from the docstring (None if none).
_Field = tuple[Any, Any, "str | None"]


def _is_context(annotation: Any) -> bool:
    """ToolContext itself, Annotated[ToolContext, ...], or ToolContext | None."""
    from ._context import ToolContext

    if annotation is ToolContext:
        return True
    origin = typing.get_origin(annotation)
    if origin is ToolContext:  # ToolContext[Deps]
        return True
    if origin is typing.Annotated:
        return _is_context(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_is_context(a) for a in typing.get_args(annotation) if a is not type(None))
    return False


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except NameError:
        pass
    # Postponed annotations naming classes local to the defining function:
    # look them up in the frames of the code that applied the decorator.
    frame = sys._getframe(1)
    localns: dict[str, Any] = {}
    for _ in range(6):
        frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            break
        localns = {**frame.f_locals, **localns}
    return typing.get_type_hints(fn, localns=localns, include_extras=True)


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The description (the docstring's text before its sections) and the
    per-parameter descriptions, from a Google, Sphinx (`:param x:`) or NumPy
    docstring (`docstring_parser` tells the style)."""
    doc = inspect.cleandoc(doc)
    if not doc:
        return "", {}
    plain = plain_docstring(doc)
    if plain is not None:
        return plain, {}
    import docstring_parser  # imported on first use: most imports decorate nothing

    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:
        return doc, {}
    description = "\n\n".join(
        part for part in (parsed.short_description, parsed.long_description) if part
    )
    params = {
        p.arg_name.lstrip("*"): " ".join(line.strip() for line in p.description.splitlines())
        for p in parsed.params
        if p.description
    }
    return description.strip(), params


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema


def _build_tool(
    fn: Callable[..., Any], *, name: str | None, description: str | None, **options: Any
) -> Tool:
    tool_name = name or fn.__name__
    try:
        hints = _type_hints(fn)
    except Exception as exc:
        raise ConfigurationError(f"tool {tool_name!r}: cannot resolve annotations: {exc}") from exc
    doc_text, param_docs = _parse_docstring(fn.__doc__ or "")
    fields: dict[str, _Field] = {}
    ctx_param: str | None = None
    untyped: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind is param.POSITIONAL_ONLY:
            continue  # filled by `Tool.partial`, never by the model
        annotation = hints.get(param.name, Any)
        if _is_context(annotation):
            ctx_param = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(f"tool {tool_name!r}: *args/**kwargs are not supported")
        if param.name not in hints:
            untyped.append(param.name)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default, param_docs.get(param.name))
    simple = _simple_arguments(tool_name, fields)
    if simple is not None:
        model, schema = None, simple.schema
    else:
        model, schema = _arguments_model(tool_name, fields)
    _warn_vague(fn, tool_name, untyped, described=description is not None or bool(doc_text))
    return Tool(
        tool_name,
        description if description is not None else doc_text,
        schema,
        fn,
        **options,
        _arguments_model=model,
        _simple_arguments=simple,
        _context_param=ctx_param,
    )


def _simple_arguments(tool_name: str, fields: Mapping[str, _Field]) -> SimpleArguments | None:
    """The arguments served without pydantic, when every parameter is a plain
    scalar with a plain default (see `_simple`); None otherwise."""
    simple: list[tuple[str, type, bool, Any, str | None]] = []
    for name, (annotation, default, described) in fields.items():
        scalar = scalar_of(annotation)
        if scalar is None or not plain_name(name):
            return None
        if default is ...:
            default = MISSING
        elif not plain_default(default):
            return None
        simple.append((name, *scalar, default, described))
    return SimpleArguments(simple, lambda: _arguments_model(tool_name, fields)[0])


def _arguments_model(
    tool_name: str, fields: Mapping[str, _Field]
) -> tuple[type[pydantic.BaseModel], dict[str, Any]]:
    """The pydantic model of a tool's arguments and its JSON schema."""
    # Imported here: a process whose tools are all plain scalars never needs it.
    import pydantic

    try:
        model = pydantic.create_model(  # type: ignore[call-overload]
            f"{tool_name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **{
                name: (annotation, pydantic.Field(default, description=described))
                for name, (annotation, default, described) in fields.items()
            },
        )
        schema = _clean_schema(model.model_json_schema())
    except (
        pydantic.PydanticSchemaGenerationError,
        pydantic.errors.PydanticInvalidForJsonSchema,
    ) as exc:
        # pydantic's advice (arbitrary_types_allowed) does not apply: a
        # model sends JSON, so name the parameter and what it can be instead.
        raise ConfigurationError(_unserialisable(tool_name, fields, exc)) from None
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"tool {tool_name!r}: invalid signature: {exc}") from exc
    return model, schema


def _unserialisable(tool_name: str, fields: Mapping[str, _Field], exc: Exception) -> str:
    import pydantic

    for name, (annotation, _, _) in fields.items():
        try:
            pydantic.TypeAdapter(annotation).json_schema()
        except Exception:
            shown = getattr(annotation, "__qualname__", None) or repr(annotation)
            module = getattr(annotation, "__module__", "")
            if module and module != "builtins" and isinstance(shown, str):
                shown = f"{module}.{shown}"
            return (
                f"tool {tool_name!r}: parameter {name!r} has type {shown}, which a model "
                "cannot send (its arguments are JSON): use str, int, float, bool, a list, "
                "dict, Literal, Enum, dataclass or pydantic model, or take the object from "
                "ctx.deps"
            )
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"tool {tool_name!r}: its signature is not JSON-serialisable: {first}"


def _warn_vague(
    fn: Callable[..., Any], tool_name: str, untyped: list[str], described: bool
) -> None:
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    problems = [
        f"parameter {name!r} has no type annotation: the model is told any JSON value will do"
        for name in untyped
    ]
    if not described:
        problems.append("it has no docstring or description=: the model sees only its name")
    module_globals = getattr(fn, "__globals__", None)
    # The function's module's registry, as `warnings.warn` would use: a
    # definition built again (an agent per request) warns once, not each time.
    registry = module_globals.setdefault("__warningregistry__", {}) if module_globals else None
    for problem in problems:
        warnings.warn_explicit(
            f"tool {tool_name!r}: {problem}",
            ToolDefinitionWarning,
            filename=code.co_filename,
            lineno=code.co_firstlineno,
            module=getattr(fn, "__module__", None) or "taskloom",
            registry=registry,
        )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    effect: ToolEffect = ToolEffect.WRITE,
    needs_approval: ApprovalRule = False,
    timeout: float | None = None,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    blocking: bool = True,
    idempotent: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    effect: ToolEffect = ToolEffect.WRITE,
    needs_approval: ApprovalRule = False,
    timeout: float | None = None,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    blocking: bool = True,
    idempotent: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a `Tool` from a function, bare (`@tool`) or with options (`@tool(...)`).

    The default effect is `WRITE`, the safe assumption: such calls run alone.
    A sync function runs on a thread unless `blocking=False` says it returns
    at once (see `Tool`); `idempotent=True` has a call cut off by a crash
    run again with the same `ctx.idempotency_key` (see `Tool`).
    """
    build = functools.partial(
        _build_tool,
        name=name,
        description=description,
        effect=effect,
        needs_approval=needs_approval,
        timeout=timeout,
        max_output_chars=max_output_chars,
        blocking=blocking,
        idempotent=idempotent,
    )
    return build if fn is None else build(fn)


def as_tool(obj: Any) -> Tool:
    """A `Tool` from a Tool, anything with a `.tool()` method, or a plain function."""
    if isinstance(obj, Tool):
        return obj
    make = getattr(obj, "tool", None)
    if callable(make) and not inspect.isfunction(obj):
        made = make()
        if isinstance(made, Tool):
            return made
    if callable(obj):
        return tool(obj)
    raise ConfigurationError(f"{obj!r} is not a tool")
