"""Tools: what a model may call.

`@tool` turns a sync or async function into a `Tool`; the JSON schema comes
from the signature (pydantic) and the description from the docstring, both
built once at decoration. A parameter annotated `ToolContext` is injected and
left out of the schema. `Tool` can also be built by hand (name, description,
schema, function) or subclassed (override `invoke`).

A function's positional-only parameters (before `/`) are not the model's:
`@tool` leaves them out of the schema, and `Tool.partial` fills them, once,
with what only the tool's host has (a runtime's services; see
`UnboundTool`).

A generator function (async or sync) is a streaming tool: every value it
yields reaches the run's subscribers at once as `ToolProgress`, and the last
one is the result the model reads.

Every call ends in exactly one result: a tool's return value becomes text, a
`ToolError` becomes an error result with its message, any other exception an
error result naming its type and message (never a traceback). Error text is
capped at `max_output_chars` exactly like output, and all of it is made valid
UTF-8 (see `taskloom.messages.valid_text`).

Sync tools run on taskloom's own daemon threads (see `taskloom.tools._threads`)
unless built `blocking=False`: then they are called inline on the event loop,
as a hand-written loop would call them. The thread is the default because
taskloom cannot tell a sync function that returns at once from one that reads
a file, sleeps or waits on a lock, and one such call inline would stall every
other run on the loop; a hand-off costs ~0.1 ms, which only matters for tools
that do pure computation on their arguments, and those are what
`blocking=False` is for.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import inspect
import json
import logging
import re
import sys
import time
import types
import typing
import warnings
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar, overload

import pydantic

from .._redact import redact
from .._schema import check as check_schema
from ..errors import ConfigurationError, ToolDefinitionWarning
from ..messages import arguments_problem, valid_result_text
from ..results import ToolSpec
from ._threads import run_in_thread

if TYPE_CHECKING:
    from ._context import ToolContext

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "Tool",
    "ToolEffect",
    "ToolError",
    "ToolOutput",
    "UnboundTool",
    "cap_output",
    "tool",
]

DEFAULT_MAX_OUTPUT_CHARS = 50_000
IDEMPOTENT_RETRIES = 3
"""How many times a call of an `idempotent` tool cut off by crashes is run
again; a call that keeps being cut off (one that takes its process down, say)
is then answered "interrupted" like any other."""

SLOW_INLINE_CALL = 0.1
"""Seconds a `blocking=False` tool may hold the event loop before the
`taskloom` logger warns (once per tool) that it should not be inline."""

logger = logging.getLogger("taskloom")

F = TypeVar("F", bound=Callable[..., Any])
H = TypeVar("H")


class ToolEffect(StrEnum):
    """What calling a tool does to the world; decides what may run concurrently."""

    READ_ONLY = "read_only"
    WRITE = "write"
    EXTERNAL = "external"


class ToolError(Exception):
    """Raise from a tool to answer the model with an error result carrying `message`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's result when the tool wants to say more than a return value:
    `is_error` marks it as an error result the model should act on.

    `content` is made valid UTF-8; when characters had to be replaced, a
    short note at the end says so.
    """

    content: str
    is_error: bool = False

    def __post_init__(self) -> None:
        if not self.content.isascii():
            object.__setattr__(self, "content", valid_result_text(self.content))


class ArgumentsInvalid(Exception):
    """The model's arguments failed validation; the message is for the model."""


ApprovalRule = bool | Callable[[dict[str, Any]], bool]


def cap_output(text: str, limit: int) -> str:
    """Keep the head and tail of `text` within `limit` characters, saying what was cut."""
    if limit <= 0 or len(text) <= limit:
        return text
    omitted = len(text) - limit
    note = f"\n[... output truncated: {omitted} characters omitted ...]\n"
    head = max(0, (limit * 2) // 3)
    tail = max(0, limit - head)
    return text[:head] + note + (text[-tail:] if tail else "")


def to_content(value: Any) -> str:
    """A tool's return value as the text the model reads: JSON when it is
    JSON data, else its `str`.

    Raises `ToolError` (an error result, in band) when the value nests too
    deeply to be encoded at all, instead of letting a `RecursionError` end
    the run.
    """
    t = type(value)
    if t is str:
        return value  # type: ignore[no-any-return]
    if t is int:
        return int.__repr__(value)  # what JSON writes, without building an encoder
    if value is None:
        return "(no output)"
    if isinstance(value, str):
        return value
    try:
        if isinstance(value, pydantic.BaseModel):
            try:
                return value.model_dump_json()
            except ValueError:
                return str(value)
        try:
            return _ENCODER.encode(value)
        except (TypeError, ValueError):
            return str(value)
    except RecursionError:
        raise ToolError(_too_deep(value)) from None


def _too_deep(value: Any) -> str:
    depth = _nesting(value)
    if depth < _DEEP:
        # The recursion was in the value's own `__str__`, not in its nesting.
        return "the tool's result could not be turned into text: its conversion recursed endlessly"
    return (
        f"the tool's result nests {depth} levels deep (lists and objects within each "
        "other), too deep to encode as text; return a flatter value"
    )


_DEEP = 100
"""Below this many levels a `RecursionError` is not the nesting's doing."""


def _nesting(value: Any) -> int:
    """How many levels of lists, tuples, mappings and pydantic models `value`
    nests (without recursing: this runs on values too deep for recursion)."""
    deepest = 0
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, pydantic.BaseModel):
            item = item.__dict__
        if not isinstance(item, list | tuple | Mapping) or id(item) in seen:
            continue
        seen.add(id(item))
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, Mapping) else item
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _json_default(value: Any) -> Any:
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    return str(value)


# Results no sync function returns as an awaitable: spared the awaitable check.
_PLAIN_RESULTS = frozenset({str, int, float, bool, dict, list, tuple, type(None)})

# One encoder for every result: `json.dumps` with options builds a new one a call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=_json_default)


def _describe(exc: BaseException) -> str:
    """`Type: message` for the model; an exception whose `str` fails is named alone."""
    try:
        text = str(exc)
    except Exception:
        text = "(its message could not be read)"
    return f"{type(exc).__name__}: {text}"


def _kind_of(fn: Callable[..., Any] | None) -> str:
    """How a tool's function is called: `async`, `async-generator`, `generator`
    or `sync` (checked once, at construction)."""
    if fn is None:
        return "sync"
    if inspect.isasyncgenfunction(fn):
        return "async-generator"
    if inspect.iscoroutinefunction(fn):
        return "async"
    if inspect.isgeneratorfunction(fn):
        return "generator"
    return "sync"


def _progress_text(value: Any) -> str:
    return value.content if isinstance(value, ToolOutput) else to_content(value)


async def _drain_async(stream: AsyncGenerator[Any, None], ctx: ToolContext) -> Any:
    """A streaming tool: every yielded value is progress, the last one the result."""
    last: Any = None
    try:
        async for value in stream:
            ctx.progress(_progress_text(value))
            last = value
    finally:
        # A cut-off stream (timeout, deadline, cancellation) runs its cleanup now.
        await stream.aclose()
    return last


def _drain_sync(gen: Generator[Any, None, None], ctx: ToolContext) -> Any:
    """`_drain_async` for a sync generator function, in its worker thread."""
    last: Any = None
    with contextlib.closing(gen):
        for value in gen:
            ctx.progress(_progress_text(value))
            last = value
    return last


def _check_schema(args: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Hand-written schemas: a structural check (see `taskloom._schema`)."""
    try:
        check_schema(dict(args), schema, "arguments")
    except ValueError as exc:
        raise ArgumentsInvalid(str(exc)) from None
    return dict(args)


class Tool:
    """A callable the model can ask for.

    `name`, `description` and `input_schema` (a JSON schema dict) are what the
    model sees. `effect` decides concurrency: calls of one turn run together
    only when all are `READ_ONLY`; a tool built with `concurrent=True` (such as
    a delegation tool) overlaps with them whatever its effect. `needs_approval` (a bool or a predicate on the arguments)
    parks the run for a human decision. `timeout` bounds one call in seconds;
    `max_output_chars` caps the result text (head and tail kept).

    `idempotent=True` promises that running a call twice with the same
    `ToolContext.idempotency_key` has the effect of running it once (the key
    sent as an API's `Idempotency-Key`, or an upsert keyed by it). A call cut
    off by a crash is then run again with that key, up to
    `IDEMPOTENT_RETRIES` times, instead of being answered "interrupted; it
    may have run".

    `blocking` concerns sync functions only (async ones never leave the
    loop): by default a sync tool runs on a daemon thread, so a tool that
    blocks never stalls other runs. `blocking=False` promises the function
    returns at once (pure computation on its arguments: no I/O, no sleep, no
    lock) and has it called inline on the event loop, saving the thread
    hand-off; a deadline or `timeout` cannot cut such a call short, and one
    that holds the loop over `SLOW_INLINE_CALL` seconds is reported (the
    `taskloom` logger, once per tool).

    `secrets` (empty unless set) are credentials the tool sends somewhere
    (an MCP server's headers, an A2A token, a command's secret
    environment), longest first: `call` replaces each with `[redacted]` in
    every result and error, so a server that echoes one never gets it into
    a log.
    """

    __slots__ = (
        "_ctx_param",
        "_fn",
        "_kind",
        "_model",
        "_slow_reported",
        "_spec",
        "_takes_context",
        "blocking",
        "concurrent",
        "description",
        "effect",
        "idempotent",
        "input_schema",
        "max_output_chars",
        "name",
        "needs_approval",
        "secrets",
        "timeout",
    )

    def __init__(
        self,
        name: str,
        description: str,
        input_schema: Mapping[str, Any],
        fn: Callable[..., Any] | None = None,
        *,
        effect: ToolEffect = ToolEffect.WRITE,
        needs_approval: ApprovalRule = False,
        timeout: float | None = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        concurrent: bool = False,
        blocking: bool = True,
        idempotent: bool = False,
        _arguments_model: type[pydantic.BaseModel] | None = None,
        _context_param: str | None = None,
    ) -> None:
        if not name or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ConfigurationError(f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'")
        if not isinstance(input_schema, Mapping) or input_schema.get("type", "object") != "object":
            raise ConfigurationError(f"tool {name!r}: input_schema must be a JSON object schema")
        self.name = name
        self.description = description
        self.input_schema = dict(input_schema)
        self.effect = ToolEffect(effect)
        self.needs_approval = needs_approval
        self.timeout = timeout
        self.max_output_chars = max_output_chars
        self.concurrent = concurrent
        self.blocking = blocking
        self.idempotent = idempotent
        self.secrets: tuple[str, ...] = ()
        self._slow_reported = False
        self._fn = fn
        self._kind = _kind_of(fn)
        self._model = _arguments_model
        self._ctx_param = _context_param
        self._spec = ToolSpec(name, description, self.input_schema)
        cls = type(self)
        self._takes_context = (
            _context_param is not None
            or self._kind in ("generator", "async-generator")  # progress goes through it
            or cls.invoke is not Tool.invoke
            or cls.call is not Tool.call
        )

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, effect={self.effect.value})"

    @property
    def spec(self) -> ToolSpec:
        """What the model is told about this tool."""
        return self._spec

    @property
    def takes_context(self) -> bool:
        """Whether a call needs its `ToolContext`: the function has a context
        parameter, streams progress, or a subclass overrides `invoke` or
        `call`. The loop builds a context for a call only when it does."""
        return self._takes_context

    @property
    def is_gated(self) -> bool:
        """Whether some call of this tool may need approval."""
        return self.needs_approval is not False

    def requires_approval(self, arguments: dict[str, Any]) -> bool:
        """Whether this particular call needs a human decision first.

        A predicate gets the validated arguments (defaults filled, types
        coerced, as the tool would); arguments that fail validation need no
        decision, since the call never runs. A predicate's exception
        propagates (the loop parks the call and says why).
        """
        rule = self.needs_approval
        if isinstance(rule, bool):
            return rule
        try:
            validated = self.validate(arguments)
        except ArgumentsInvalid:
            return False
        return bool(rule(validated))

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments checked against the schema, as keyword arguments.

        Arguments JSON cannot carry (NaN, infinities, nesting deeper than
        `taskloom.messages.MAX_ARGUMENT_DEPTH`) are refused first. Raises
        `ArgumentsInvalid` with a message written for the model.
        """
        problem = arguments_problem(arguments)
        if problem is not None:
            raise ArgumentsInvalid(problem)
        if self._model is None:
            return _check_schema(arguments, self.input_schema)
        try:
            parsed = self._model.__pydantic_validator__.validate_python(arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise ArgumentsInvalid(problems) from None
        # extra="forbid": the instance holds exactly the declared fields.
        return dict(parsed.__dict__)

    async def invoke(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        """Run the tool with validated keyword arguments; override in subclasses."""
        if self._fn is None:
            raise NotImplementedError(f"tool {self.name!r} has no function; override invoke()")
        if self._ctx_param is not None:
            arguments = {**arguments, self._ctx_param: ctx}
        kind = self._kind
        if kind == "async":
            return await self._fn(**arguments)
        if kind == "async-generator":
            return await _drain_async(self._fn(**arguments), ctx)
        if not self.blocking:
            return await self._inline(kind, arguments, ctx)
        if kind == "generator":
            return await run_in_thread(_drain_sync, {"gen": self._fn(**arguments), "ctx": ctx})
        result = await run_in_thread(self._fn, arguments)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _inline(self, kind: str, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        assert self._fn is not None
        started = time.perf_counter()
        if kind == "generator":
            result = _drain_sync(self._fn(**arguments), ctx)
        else:
            result = self._fn(**arguments)
        held = time.perf_counter() - started
        if held > SLOW_INLINE_CALL and not self._slow_reported:
            self._slow_reported = True
            logger.warning(
                "tool %r is built blocking=False but held the event loop for %.0f ms, "
                "stalling every other run meanwhile; drop blocking=False so it runs on a thread",
                self.name,
                held * 1000,
            )
        if type(result) not in _PLAIN_RESULTS and inspect.isawaitable(result):
            result = await result
        return result

    async def call(self, arguments: dict[str, Any], ctx: ToolContext | None) -> ToolOutput:
        """Validate, run (within `timeout`) and turn the outcome into one result.

        Output and error text alike are capped at `max_output_chars` and have
        the tool's `secrets` redacted. `ctx` may be None for a tool that does
        not `takes_context` (the loop passes None then).
        """
        output = await self._outcome(arguments, ctx)
        if self.secrets:
            return ToolOutput(redact(output.content, self.secrets), output.is_error)
        return output

    async def _outcome(self, arguments: dict[str, Any], ctx: ToolContext | None) -> ToolOutput:
        try:
            kwargs = self.validate(arguments)
        except ArgumentsInvalid as exc:
            return self._error(
                f"Invalid arguments for tool {self.name!r}: {exc}. "
                f"Expected arguments following this JSON schema: {json.dumps(self.input_schema)}"
            )
        try:
            if self.timeout is None:
                value = await self.invoke(kwargs, ctx)  # type: ignore[arg-type]
            else:
                deadline = asyncio.timeout(self.timeout)
                try:
                    async with deadline:
                        value = await self.invoke(kwargs, ctx)  # type: ignore[arg-type]
                except TimeoutError:
                    # Only our own deadline is a timeout of the tool; a
                    # TimeoutError the tool raised itself is its own error.
                    if not deadline.expired():
                        raise
                    return self._error(f"tool {self.name!r} timed out after {self.timeout:g}s")
        except ToolError as exc:
            return self._error(str(exc.message))
        except Exception as exc:
            return self._error(_describe(exc))
        if isinstance(value, ToolOutput):
            return ToolOutput(cap_output(value.content, self.max_output_chars), value.is_error)
        try:
            content = to_content(value)
        except ToolError as exc:
            return self._error(exc.message)
        return ToolOutput(cap_output(content, self.max_output_chars))

    def _error(self, text: str) -> ToolOutput:
        return ToolOutput(cap_output(text, self.max_output_chars), is_error=True)

    def partial(self, *values: object) -> Self:
        """A copy of this tool whose function gets `values` first, before the
        model's arguments: they fill its positional-only parameters, which
        `@tool` leaves out of the schema. Name, schema, validation and
        options are this tool's."""
        fn = self._fn
        if fn is None:
            raise ConfigurationError(f"tool {self.name!r} has no function to give values to")
        given = copy.copy(self)
        given._fn = functools.partial(fn, *values)
        return given


class UnboundTool(Tool, Generic[H]):
    """A tool whose function needs what only the runtime offering it has (its
    background service, its store): it stands for `template` in an agent's
    definition (name, description, schema, effect, approval), and the
    runtime that offers it binds it once (`bind_runtime`, see
    `taskloom.runtime.BindsRuntime`) to `template.partial(given(runtime))`.

    It is never run itself: called unbound (outside a runtime's session), it
    answers with an error.
    """

    __slots__ = ("__weakref__", "_given", "template")

    def __init__(self, template: Tool, given: Callable[[H], object]) -> None:
        super().__init__(
            template.name,
            template.description,
            template.input_schema,
            effect=template.effect,
            needs_approval=template.needs_approval,
            timeout=template.timeout,
            max_output_chars=template.max_output_chars,
            concurrent=template.concurrent,
            blocking=template.blocking,
            idempotent=template.idempotent,
        )
        self.template = template
        self.secrets = template.secrets
        self._given = given

    def __repr__(self) -> str:
        return f"UnboundTool({self.name!r}, effect={self.effect.value})"

    def bind_runtime(self, runtime: H) -> Tool:
        """The tool that runs on `runtime`: the template given what `runtime` gives it."""
        return self.template.partial(self._given(runtime))

    async def invoke(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        """Refuse: only the copy a runtime binds runs."""
        raise ToolError(
            f"tool {self.name!r} runs only as a runtime offers it (in one of its sessions)"
        )


# ---------------------------------------------------------------- @tool


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
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    effect: ToolEffect,
    needs_approval: ApprovalRule,
    timeout: float | None,
    max_output_chars: int,
    blocking: bool,
    idempotent: bool,
) -> Tool:
    tool_name = name or fn.__name__
    try:
        hints = _type_hints(fn)
    except Exception as exc:
        raise ConfigurationError(f"tool {tool_name!r}: cannot resolve annotations: {exc}") from exc
    doc_text, param_docs = _parse_docstring(fn.__doc__ or "")
    fields: dict[str, Any] = {}
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
        fields[param.name] = (
            annotation,
            pydantic.Field(default, description=param_docs.get(param.name)),
        )
    try:
        model = pydantic.create_model(  # type: ignore[call-overload]
            f"{tool_name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
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
    _warn_vague(fn, tool_name, untyped, described=description is not None or bool(doc_text))
    return Tool(
        tool_name,
        description if description is not None else doc_text,
        schema,
        fn,
        effect=effect,
        needs_approval=needs_approval,
        timeout=timeout,
        max_output_chars=max_output_chars,
        blocking=blocking,
        idempotent=idempotent,
        _arguments_model=model,
        _context_param=ctx_param,
    )


def _unserialisable(tool_name: str, fields: Mapping[str, Any], exc: Exception) -> str:
    """Which parameter has a type with no JSON schema, in one line."""
    for name, (annotation, _) in fields.items():
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
    """`ToolDefinitionWarning`s for what leaves the model guessing, at the function's line."""
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
    options = {
        "name": name,
        "description": description,
        "effect": effect,
        "needs_approval": needs_approval,
        "timeout": timeout,
        "max_output_chars": max_output_chars,
        "blocking": blocking,
        "idempotent": idempotent,
    }
    if fn is not None:
        return _build_tool(fn, **options)  # type: ignore[arg-type]

    def decorate(f: Callable[..., Any]) -> Tool:
        return _build_tool(f, **options)  # type: ignore[arg-type]

    return decorate


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
