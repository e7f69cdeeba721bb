"""Agent: an immutable definition of model, instructions and tools.

Constructing one does no I/O and no schema work: tool schemas were built when
the tools were decorated, a model given as a string is resolved when a run
first needs it, and an output schema is turned into JSON schema lazily.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._schema import check as check_schema
from .errors import ConfigurationError
from .loop._compact import Compaction
from .models._base import Model, ModelSettings
from .tools import Tool, Toolset, as_tool

if TYPE_CHECKING:
    from .events import Event
    from .loop._options import RunOptions
    from .messages import Message
    from .results import RunResult
    from .runtime import Runtime

__all__ = ["Agent"]

_UNSET: Any = object()


class Agent:
    """What an agent is: `name`, `model` (a `Model` or a `"provider:model"`
    string), `instructions` (the system prompt), `tools`: tools, functions,
    and toolsets (such as `taskloom.mcp.MCPServer`), which land in `toolsets`.

    `output_schema` (a pydantic model class or a JSON schema dict) makes the
    final answer validated JSON, exposed as `RunResult.output`; the model gets
    `fixes` corrective rounds before the run ends FAILED. `settings` are the
    model settings (temperature, reasoning, context window, ...). `compaction`
    (a `Compaction`) lets long sessions summarize their older part instead of
    overflowing the model's window. Agents are immutable;
    `replace(...)` gives a changed copy.
    """

    __slots__ = (
        "_json_schema",
        "_tool_map",
        "compaction",
        "description",
        "fixes",
        "instructions",
        "model",
        "name",
        "output_schema",
        "settings",
        "tools",
        "toolsets",
    )

    name: str
    model: Model | str
    instructions: str | None
    tools: tuple[Tool, ...]
    toolsets: tuple[Toolset, ...]
    output_schema: type[Any] | Mapping[str, Any] | None
    settings: ModelSettings
    description: str
    fixes: int
    compaction: Compaction | None
    _tool_map: dict[str, Tool]
    _json_schema: Any

    def __init__(
        self,
        name: str = "agent",
        model: Model | str | None = None,
        instructions: str | None = None,
        tools: Iterable[Any] = (),
        *,
        output_schema: type[Any] | Mapping[str, Any] | None = None,
        settings: ModelSettings | None = None,
        description: str = "",
        fixes: int = 2,
        compaction: Compaction | None = None,
    ) -> None:
        if model is None:
            raise ConfigurationError(f"agent {name!r} has no model: pass model=")
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
        s = object.__setattr__
        s(self, "name", name)
        s(self, "model", model)
        s(self, "instructions", instructions)
        s(self, "tools", tool_tuple)
        s(self, "toolsets", toolsets)
        s(self, "_tool_map", tool_map)
        s(self, "output_schema", output_schema)
        s(self, "settings", settings if settings is not None else _DEFAULT_SETTINGS)
        s(self, "description", description)
        s(self, "fixes", fixes)
        s(self, "compaction", compaction)
        s(self, "_json_schema", _UNSET)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Agent is immutable; use agent.replace(...)")

    def __repr__(self) -> str:
        model = (
            self.model if isinstance(self.model, str) else getattr(self.model, "spec", self.model)
        )
        names = [t.name for t in self.tools] + [f"{ts.name}:*" for ts in self.toolsets]
        return f"Agent({self.name!r}, model={model!r}, tools={names})"

    def replace(self, **changes: Any) -> Agent:
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

    # ------------------------------------------------------------ output

    @property
    def output_json_schema(self) -> Mapping[str, Any] | None:
        """The output schema as JSON schema (computed once, on first use)."""
        cached = self._json_schema
        if cached is not _UNSET:
            return cached  # type: ignore[no-any-return]
        schema = self.output_schema
        result: Mapping[str, Any] | None
        if schema is None:
            result = None
        elif isinstance(schema, Mapping):
            result = dict(schema)
        else:
            import pydantic

            result = pydantic.TypeAdapter(schema).json_schema()
        object.__setattr__(self, "_json_schema", result)
        return result

    @property
    def output_name(self) -> str:
        """A name for the structured output (the schema's title or class name)."""
        schema = self.output_schema
        if schema is None:
            return "output"
        if isinstance(schema, Mapping):
            return str(schema.get("title") or "output")
        return getattr(schema, "__name__", "output")

    def parse_output(self, text: str) -> Any:
        """The final answer validated against `output_schema`; ValueError says why not."""
        schema = self.output_schema
        if schema is None:
            return text
        raw = _strip_fences(text)
        if isinstance(schema, Mapping):
            try:
                value = json.loads(raw)
            except ValueError as exc:
                raise ValueError(f"not valid JSON ({exc})") from None
            check_schema(value, schema)
            return value
        import pydantic

        try:
            return pydantic.TypeAdapter(schema).validate_json(raw)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(value)'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise ValueError(problems) from None

    # ------------------------------------------------------------ running

    async def run(
        self,
        input: str | Message,
        *,
        options: RunOptions | None = None,
        runtime: Runtime | None = None,
    ) -> RunResult:
        """Run once in a fresh session (an in-memory runtime unless one is given)."""
        from .runtime import Runtime

        rt = runtime if runtime is not None else Runtime()
        session = await rt.create_session(self)
        return await session.run(input, options=options)

    def run_sync(
        self,
        input: str | Message,
        *,
        options: RunOptions | None = None,
        runtime: Runtime | None = None,
    ) -> RunResult:
        """`run` for scripts: runs its own event loop.

        It returns when the run ends, at the latest at the deadline: a sync
        tool still running then is abandoned, not waited for. Its thread (a
        daemon) keeps running until the function returns, since Python cannot
        kill a thread, so its effects may land after this returned, and
        nothing keeps the process alive for it.
        """
        return asyncio.run(self.run(input, options=options, runtime=runtime))

    async def stream(
        self,
        input: str | Message,
        *,
        options: RunOptions | None = None,
        runtime: Runtime | None = None,
    ) -> AsyncIterator[Event]:
        """Run once in a fresh session, yielding its events."""
        from .runtime import Runtime

        rt = runtime if runtime is not None else Runtime()
        session = await rt.create_session(self)
        async for event in session.stream(input, options=options):
            yield event


_DEFAULT_SETTINGS = ModelSettings()
_FIELDS = (
    "name",
    "model",
    "instructions",
    "tools",
    "output_schema",
    "settings",
    "description",
    "fixes",
    "compaction",
)


def _strip_fences(text: str) -> str:
    raw = text.strip()
    if raw.startswith("```"):
        raw = raw.split("\n", 1)[1] if "\n" in raw else raw[3:]
        if raw.rstrip().endswith("```"):
            raw = raw.rstrip()[:-3]
    return raw.strip()
