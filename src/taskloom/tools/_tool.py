"""Tools: what a model may call.

A `Tool` is built by hand, subclassed (override `invoke`), or made from a
function by `@tool`. A generator function (async or sync) is a streaming tool:
each value it yields reaches subscribers as `ToolProgress`, the last is the
result. Sync tools run on daemon threads by default because taskloom cannot
tell a sync function that returns at once from one that blocks, and one
blocking call inline would stall every run on the loop.
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
import time
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from .._output_type import validation_problems
from .._redact import redact
from .._schema import check as check_schema
from ..errors import ConfigurationError
from ..messages import arguments_problem
from ..results import ToolSpec
from ._output import (
    DEFAULT_MAX_OUTPUT_CHARS,
    ToolError,
    ToolOutput,
    cap_output,
    describe_error,
    to_content,
)
from ._threads import run_in_thread

if TYPE_CHECKING:
    import pydantic

    from ._context import ToolContext
    from ._simple import SimpleArguments

IDEMPOTENT_RETRIES = 3
"""How many times a call of an `idempotent` tool cut off by crashes is run
again; a call that keeps being cut off (one that takes its process down, say)
is then answered "interrupted" like any other."""

SLOW_INLINE_CALL = 0.1
"""Seconds a `blocking=False` tool may hold the event loop before the
`taskloom` logger warns (once per tool) that it should not be inline."""

logger = logging.getLogger("taskloom")

H = TypeVar("H")


class ToolEffect(StrEnum):
    """What calling a tool does to the world; decides what may run concurrently."""

    READ_ONLY = "read_only"
    WRITE = "write"
    EXTERNAL = "external"


class ArgumentsInvalid(Exception):
    """The model's arguments failed validation; the message is for the model."""


ApprovalRule = bool | Callable[[dict[str, Any]], bool]


# Results no sync function returns as an awaitable: spared the awaitable check.
_PLAIN_RESULTS = frozenset({str, int, float, bool, dict, list, tuple, type(None)})


def _kind_of(fn: Callable[..., Any] | None) -> str:
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
    last: Any = None
    with contextlib.closing(gen):
        for value in gen:
            ctx.progress(_progress_text(value))
            last = value
    return last


def _check_schema(args: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    try:
        check_schema(dict(args), schema, "arguments")
    except ValueError as exc:
        raise ArgumentsInvalid(str(exc)) from None
    return dict(args)


class Tool:
    """A callable the model can ask for.

    `name`, `description` and `input_schema` (a JSON schema dict) are what the
    model sees. `effect` decides concurrency: calls of one turn run together
    only when all are `READ_ONLY`; a `concurrent=True` tool (a delegation tool)
    overlaps with them whatever its effect. `needs_approval` (a bool or a
    predicate on the arguments) parks the run for a human decision. `timeout`
    bounds one call in seconds; `max_output_chars` caps the result text (head
    and tail kept).

    `idempotent=True` promises that running a call twice with the same
    `ToolContext.idempotency_key` has the effect of running it once: a call
    cut off by a crash is then run again with that key, up to
    `IDEMPOTENT_RETRIES` times, instead of being answered "interrupted".

    A sync function runs on a daemon thread, so one that blocks never stalls
    other runs; `blocking=False` promises it returns at once (no I/O, sleep
    or lock) and has it called inline on the event loop: no deadline or
    `timeout` cuts it short, and one that holds the loop over
    `SLOW_INLINE_CALL` seconds is logged (`taskloom` logger, once per tool).

    `secrets` (empty unless set) are credentials the tool sends somewhere
    (an MCP server's headers, a command's secret environment), longest
    first: `call` replaces each with `[redacted]` in every result and error.

    `native` gives the tool's provider-native wire definitions by provider
    (see `ToolSpec.native`): Anthropic's memory tool is sent to Anthropic as
    `{"type": "memory_20250818", "name": "memory"}` and to every other
    provider as a function with this `input_schema`.
    """

    __slots__ = (
        "_ctx_param",
        "_fn",
        "_kind",
        "_model",
        "_simple",
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
        native: Mapping[str, Mapping[str, Any]] | None = None,
        _arguments_model: type[pydantic.BaseModel] | None = None,
        _simple_arguments: SimpleArguments | None = None,
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
        self._simple = _simple_arguments
        self._ctx_param = _context_param
        self._spec = (
            ToolSpec(name, description, self.input_schema)
            if not native
            else ToolSpec(name, description, self.input_schema, MappingProxyType(dict(native)))
        )
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
        model = self._model
        if model is None:
            simple = self._simple
            if simple is None:
                return _check_schema(arguments, self.input_schema)
            kwargs = simple.check(arguments)
            if kwargs is not None:
                return kwargs
            model = simple.model()
        import pydantic  # imported already: `model` is one of its models

        try:
            parsed = model.__pydantic_validator__.validate_python(arguments)
        except pydantic.ValidationError as exc:
            raise ArgumentsInvalid(validation_problems(exc, "(arguments)")) from None
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
            # Run here, on the loop (no coroutine of its own: every call of
            # such a tool passes this way).
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
                    "stalling every other run meanwhile; drop blocking=False so it runs on a "
                    "thread",
                    self.name,
                    held * 1000,
                )
            if type(result) not in _PLAIN_RESULTS and inspect.isawaitable(result):
                result = await result
            return result
        if kind == "generator":
            return await run_in_thread(_drain_sync, {"gen": self._fn(**arguments), "ctx": ctx})
        result = await run_in_thread(self._fn, arguments)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def call(self, arguments: dict[str, Any], ctx: ToolContext | None) -> ToolOutput:
        """Validate, run (within `timeout`) and turn the outcome into one result.

        Output and error text alike are capped at `max_output_chars` and have
        the tool's `secrets` redacted. `ctx` may be None for a tool that does
        not `takes_context` (the loop passes None then).
        """
        # One coroutine from arguments to result: every tool call passes here.
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
            return self._error(describe_error(exc))
        if isinstance(value, ToolOutput):
            output = ToolOutput(cap_output(value.content, self.max_output_chars), value.is_error)
        else:
            try:
                content = to_content(value)
            except ToolError as exc:
                return self._error(exc.message)
            output = ToolOutput(cap_output(content, self.max_output_chars))
        if self.secrets:
            return ToolOutput(redact(output.content, self.secrets), output.is_error)
        return output

    def _error(self, text: str) -> ToolOutput:
        output = ToolOutput(cap_output(text, self.max_output_chars), is_error=True)
        if self.secrets:
            return ToolOutput(redact(output.content, self.secrets), True)
        return output

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
    definition, and the runtime that offers it binds it once (`bind_runtime`,
    see `taskloom.runtime.BindsRuntime`) to `template.partial(given(runtime))`.
    Called unbound (outside a runtime's session), it answers with an error.
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
            native=template.spec.native,
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
