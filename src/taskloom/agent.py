"""Agent: an immutable definition of model, instructions, tools and output type.

Constructing one does no I/O and no schema work: tool schemas were built when
the tools were decorated, a model given as a string is resolved when a run
first needs it, and an output type is turned into JSON schema lazily. It
does check every argument, so a mistake fails here, saying what is valid.

`Agent` is generic in its dependencies and its output, `Agent[Deps, Output]`,
both inferred from the constructor (`deps_type=`, `output_type=`), so type
checkers see `RunResult[Invoice]` from `Agent(..., output_type=Invoice).run()`.
"""

from __future__ import annotations

import asyncio
import sys
import typing
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, overload

from typing_extensions import TypeVar

from ._output_type import OutputType
from .errors import ConfigurationError, UsageError
from .loop import RunStream
from .loop.ports import OUTPUT_TOOL
from .models import Model, ModelSettings
from .tools import Tool, ToolLike, Toolset, as_tool

if TYPE_CHECKING:
    from .events import Event
    from .loop import Compaction, RunOptions
    from .memory import Memory
    from .messages import Message
    from .results import RunResult, ToolSpec

__all__ = ["Agent", "AgentDepsT", "AgentOutputT", "AgentRunner", "set_default_runtime"]

AgentDepsT = TypeVar("AgentDepsT", default=None)
"""The type of the dependencies an agent's runs take (`deps_type=`; None without)."""

AgentOutputT = TypeVar("AgentOutputT", default=str)
"""The type of an agent's output (`output_type=`; `str`, the answer's text, without)."""

OutputSpec = type[Any] | Mapping[str, Any]
"""What `output_type=` takes: a type pydantic validates (a pydantic model, a
dataclass, a TypedDict, `list[int]`, ...) or a JSON schema dict."""


class Agent(Generic[AgentDepsT, AgentOutputT]):
    """What an agent is: `name`, `model` (a `Model` or a `"provider:model"`
    string), `instructions` (the system prompt), `tools`: tools, functions,
    and toolsets (such as `taskloom.mcp.MCPServer`), which land in `toolsets`.

    `output_type` (a pydantic model, a dataclass, a TypedDict, any type
    pydantic validates, or a JSON schema dict) makes the final answer a validated value,
    `RunResult.output`: asked for natively where the model has structured
    output, else through a `final_result` tool. The model gets `fixes`
    corrective turns for an invalid answer before the run ends FAILED.
    `output` is that type made usable (`taskloom.OutputType`: its JSON
    schema and the checks an answer passes), None for a text answer.

    `deps_type` declares what a run's `deps` are (`run(..., deps=...)`):
    tools receive them as `ctx.deps` (`ToolContext[Deps]`). Deps are per
    run, held in memory only, never written to the session's log; a child
    agent (SubAgent, Spawner) gets none of its parent's.

    `settings` are the model settings (temperature, reasoning, context
    window, ...). `compaction` (a `Compaction`) lets long sessions summarize
    their older part instead of overflowing the model's window. `memory` (a
    `taskloom.memory.Memory`) gives it blocks of long-term memory in its
    instructions and the tools to edit them (a run's `RunOptions(memory=...)`
    overrides it). Agents are
    immutable; `replace(...)` gives a changed copy.
    """

    __slots__ = (
        "_tool_map",
        "_tool_specs",
        "compaction",
        "deps_type",
        "description",
        "fixes",
        "instructions",
        "memory",
        "model",
        "name",
        "output",
        "output_type",
        "settings",
        "tools",
        "toolsets",
    )

    name: str
    model: Model | str
    instructions: str | None
    tools: tuple[Tool, ...]
    output_type: OutputSpec | None
    output: OutputType | None
    deps_type: type[Any] | None
    toolsets: tuple[Toolset, ...]
    settings: ModelSettings
    description: str
    fixes: int
    compaction: Compaction | None
    memory: Memory | None
    _tool_map: dict[str, Tool]
    _tool_specs: tuple[ToolSpec, ...]

    @overload
    def __init__(
        self: Agent[AgentDepsT, AgentOutputT],
        name: str = ...,
        model: Model | str | None = ...,
        instructions: str | None = ...,
        tools: Iterable[ToolLike] = ...,
        *,
        deps_type: type[AgentDepsT] = ...,
        output_type: type[AgentOutputT] | None = None,
        settings: ModelSettings | None = ...,
        description: str = ...,
        fixes: int = ...,
        compaction: Compaction | None = ...,
        memory: Memory | None = ...,
    ) -> None: ...

    @overload
    def __init__(
        self: Agent[AgentDepsT, Any],
        name: str = ...,
        model: Model | str | None = ...,
        instructions: str | None = ...,
        tools: Iterable[ToolLike] = ...,
        *,
        deps_type: type[AgentDepsT] = ...,
        output_type: Mapping[str, Any],
        settings: ModelSettings | None = ...,
        description: str = ...,
        fixes: int = ...,
        compaction: Compaction | None = ...,
        memory: Memory | None = ...,
    ) -> None: ...

    def __init__(
        self,
        name: str = "agent",
        model: Model | str | None = None,
        instructions: str | None = None,
        tools: Iterable[ToolLike] = (),
        *,
        deps_type: type[Any] | None = None,
        output_type: type[Any] | Mapping[str, Any] | None = None,
        settings: ModelSettings | None = None,
        description: str = "",
        fixes: int = 2,
        compaction: Compaction | None = None,
        memory: Memory | None = None,
    ) -> None:
        # The checks cost little on the common path (exact types, defaults
        # left alone): constructing an agent stays within a few microseconds.
        if type(name) is not str or not name:
            raise ConfigurationError(f"Agent(name={name!r}): the name must be a non-empty string")
        if type(model) not in _MODEL_TYPES:
            _check_model(name, model)
        if instructions is not None and not isinstance(instructions, str):
            raise _invalid(
                name, "instructions", instructions, "a string (the system prompt) or None"
            )
        output = None if output_type is None else _output_option(name, output_type)
        if deps_type is not None and not _is_type_form(deps_type):
            raise _invalid(name, "deps_type", deps_type, "a type (a class, dataclass, ...) or None")
        if settings is not None and not isinstance(settings, ModelSettings):
            raise _invalid(name, "settings", settings, "a taskloom.models.ModelSettings or None")
        if type(fixes) is not int or fixes < 0:
            raise _invalid(name, "fixes", fixes, "an int of at least 0")
        if compaction is not None and not _is_compaction(compaction):
            raise _invalid(name, "compaction", compaction, "a taskloom.Compaction or None")
        if memory is not None:
            _check_memory(name, memory)
        if type(description) is not str and not isinstance(description, str):
            raise _invalid(name, "description", description, "a string")
        if type(tools) is not list and (
            isinstance(tools, str | bytes) or not hasattr(tools, "__iter__")
        ):
            raise _invalid(
                name, "tools", tools, "a list of tools (@tool functions or Tool objects)"
            )
        own: list[Tool] = []
        sets: list[Toolset] = []
        for t in tools:
            if type(t) is Tool:
                own.append(t)
            elif isinstance(t, Toolset):
                sets.append(t)
            else:
                own.append(as_tool(t))
        tool_tuple = tuple(own)
        toolsets = tuple(sets)
        tool_map: dict[str, Tool] = {}
        for t in tool_tuple:
            if t.name in tool_map:
                raise ConfigurationError(f"agent {name!r} has two tools named {t.name!r}")
            tool_map[t.name] = t
        if output is not None and OUTPUT_TOOL in tool_map:
            raise ConfigurationError(
                f"agent {name!r}: the tool name {OUTPUT_TOOL!r} is reserved for the final answer "
                "of an agent with an output_type; rename the tool"
            )
        s = object.__setattr__
        s(self, "name", name)
        s(self, "model", model)
        s(self, "instructions", instructions)
        s(self, "tools", tool_tuple)
        s(self, "toolsets", toolsets)
        s(self, "_tool_map", tool_map)
        s(self, "output_type", output)
        s(self, "output", None if output is None else OutputType(output, name))
        s(self, "deps_type", deps_type)
        s(self, "settings", settings if settings is not None else _DEFAULT_SETTINGS)
        s(self, "description", description)
        s(self, "fixes", fixes)
        s(self, "compaction", compaction)
        s(self, "memory", memory)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Agent is immutable; use agent.replace(...)")

    def __repr__(self) -> str:
        model = (
            self.model if isinstance(self.model, str) else getattr(self.model, "spec", self.model)
        )
        names = [t.name for t in self.tools] + [f"{ts.name}:*" for ts in self.toolsets]
        return f"Agent({self.name!r}, model={model!r}, tools={names})"

    def replace(self, **changes: Any) -> Agent[Any, Any]:
        """A copy with some fields changed."""
        unknown = set(changes) - set(_FIELDS)
        if unknown:
            raise TypeError(f"Agent has no field(s) {sorted(unknown)}")
        current: dict[str, Any] = {name: getattr(self, name) for name in _FIELDS}
        current["tools"] = (*self.tools, *self.toolsets)
        current.update(changes)
        return Agent(**current)

    @property
    def tool_map(self) -> Mapping[str, Tool]:
        """The agent's own tools by name (a session adds its toolsets' current ones)."""
        return self._tool_map

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is told about the agent's own tools: one tuple for
        all its sessions, so adapters can reuse their encoding of it."""
        try:
            return self._tool_specs
        except AttributeError:  # made on first use: construction stays cheap
            specs = tuple(t.spec for t in self.tools)
            object.__setattr__(self, "_tool_specs", specs)
            return specs

    def check_deps(self, deps: object) -> None:
        """Raise `UsageError` when `deps` do not fit `deps_type` (a run's first check)."""
        expected = self.deps_type
        if expected is None or expected is type(None):
            return
        if deps is None:
            raise UsageError(
                f"agent {self.name!r} needs deps of type {_type_name(expected)}: "
                "pass run(..., deps=...)"
            )
        if isinstance(expected, type) and not isinstance(deps, expected):
            raise UsageError(
                f"agent {self.name!r} takes deps of type {_type_name(expected)}, "
                f"got {type(deps).__name__}"
            )

    async def run(
        self,
        input: str | Message,
        *,
        deps: AgentDepsT = None,  # type: ignore[assignment]
        options: RunOptions | None = None,
        runtime: AgentRunner | None = None,
    ) -> RunResult[AgentOutputT]:
        """Run once in a fresh session; `deps` reach the tools as `ctx.deps`.

        Without `runtime`, the session lives on the event loop's in-memory
        default runtime (`taskloom.runtime.default_runtime`) and is forgotten
        when the run and the work it started have ended: pass a `Runtime` to
        keep sessions (to resume a parked run, read its log, or receive
        deferred items after the run).
        """
        self.check_deps(deps)
        rt = runtime if runtime is not None else _default_runtime[-1]()
        session = await rt.create_session(self)
        try:
            return await session.run(input, deps=deps, options=options)
        finally:
            if runtime is None:
                await rt.forget_session(session.id)

    def run_sync(
        self,
        input: str | Message,
        *,
        deps: AgentDepsT = None,  # type: ignore[assignment]
        options: RunOptions | None = None,
        runtime: AgentRunner | None = None,
    ) -> RunResult[AgentOutputT]:
        """`run` for scripts: runs its own event loop.

        It returns when the run ends, at the latest at the deadline: a sync
        tool still running then is abandoned, not waited for. Its thread (a
        daemon) keeps running until the function returns, since Python cannot
        kill a thread, so its effects may land after this returned, and
        nothing keeps the process alive for it.
        """
        return asyncio.run(self.run(input, deps=deps, options=options, runtime=runtime))

    async def stream(
        self,
        input: str | Message,
        *,
        deps: AgentDepsT = None,  # type: ignore[assignment]
        options: RunOptions | None = None,
        runtime: AgentRunner | None = None,
    ) -> AsyncIterator[Event]:
        """Run once in a fresh session, yielding its events (the session as
        with `run`)."""
        self.check_deps(deps)
        rt = runtime if runtime is not None else _default_runtime[-1]()
        session = await rt.create_session(self)
        try:
            async for event in session.stream(input, deps=deps, options=options):
                yield event
        finally:
            if runtime is None:
                await rt.forget_session(session.id)


_DepsT = TypeVar("_DepsT")
_OutT = TypeVar("_OutT")
_DepsT_contra = TypeVar("_DepsT_contra", contravariant=True)


class _OneSession(Protocol[_DepsT_contra, _OutT]):
    @property
    def id(self) -> str: ...

    async def run(
        self, input: str | Message, *, deps: _DepsT_contra, options: RunOptions | None
    ) -> RunResult[_OutT]: ...

    def stream(
        self, input: str | Message, *, deps: _DepsT_contra, options: RunOptions | None
    ) -> RunStream[_OutT]: ...


class AgentRunner(Protocol):
    """What `Agent.run` and `Agent.stream` run on: a `taskloom.Runtime`."""

    async def create_session(self, agent: Agent[_DepsT, _OutT]) -> _OneSession[_DepsT, _OutT]:
        """A new session for `agent`."""
        ...

    async def forget_session(self, session_id: str) -> None:
        """Delete the session once its run and work have ended."""
        ...


_default_runtime: list[Callable[[], AgentRunner]] = []


def set_default_runtime(make: Callable[[], AgentRunner]) -> None:
    """Set what `Agent.run` and `Agent.stream` run on when given no runtime
    (`taskloom.runtime` sets its `default_runtime` when imported)."""
    _default_runtime.append(make)


_DEFAULT_SETTINGS = ModelSettings()
_FIELDS = (
    "name",
    "model",
    "instructions",
    "tools",
    "deps_type",
    "output_type",
    "settings",
    "description",
    "fixes",
    "compaction",
    "memory",
)


_MODEL_TYPES: set[type[Any]] = set()
"""Model classes already seen to have `request` and `stream` (strings are
checked every time: their form is the check)."""


def _is_compaction(value: object) -> bool:
    """Whether `value` is a `Compaction` (its module is imported only for an
    agent given a policy: a plain run never loads it)."""
    from .loop import Compaction

    return isinstance(value, Compaction)


def _invalid(agent: str, option: str, value: object, valid: str) -> ConfigurationError:
    return ConfigurationError(
        f"agent {agent!r}: {option} must be {valid}, not {value!r} ({type(value).__name__})"
    )


def _check_memory(agent: str, memory: object) -> None:
    # Imported here: an agent without memory never loads the memory package.
    from .memory import Memory

    if not isinstance(memory, Memory):
        raise _invalid(agent, "memory", memory, "a taskloom.memory.Memory or None")


def _check_model(agent: str, model: object) -> None:
    valid = (
        "a Model (ScriptedModel, OpenAIChatModel, AnthropicModel, ...) or a "
        "'provider:model' string such as 'openai:gpt-4.1-mini'"
    )
    if model is None:
        raise ConfigurationError(f"agent {agent!r} has no model: pass model=, {valid}")
    if isinstance(model, str):
        prefix, sep, rest = model.partition(":")
        if not (prefix and sep and rest):
            raise ConfigurationError(f"agent {agent!r}: model {model!r} is not {valid}")
    elif callable(getattr(model, "request", None)) and callable(getattr(model, "stream", None)):
        _MODEL_TYPES.add(type(model))  # later agents of this model class skip the check
    else:
        raise _invalid(agent, "model", model, valid)


def _is_type_form(value: object) -> bool:
    """A class, or a typing form (`list[int]`, `Literal[...]`, `A | B`, ...)."""
    return isinstance(value, type) or typing.get_origin(value) is not None


def _output_option(agent: str, output: object) -> OutputSpec | None:
    if output is str:
        return None  # the answer's text, as without an output type
    if isinstance(output, Mapping):
        return output
    if _is_type_form(output):
        if sys.version_info < (3, 12) and type(output).__module__ == "typing":
            if typing.is_typeddict(output):
                raise ConfigurationError(
                    f"agent {agent!r}: output_type {_type_name(output)} is a typing.TypedDict, "
                    "which pydantic validates only from Python 3.12 on; define it with "
                    "typing_extensions.TypedDict"
                )
        return output  # type: ignore[return-value]
    raise _invalid(
        agent,
        "output_type",
        output,
        "a type pydantic validates (a pydantic model, dataclass, TypedDict, list[...], ...) "
        "or a JSON schema dict",
    )


def _type_name(t: object) -> str:
    return getattr(t, "__name__", None) or repr(t)
