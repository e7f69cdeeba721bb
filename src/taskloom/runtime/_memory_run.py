"""A run's long-term memory: which `Memory` it gets, its blocks rendered into
the agent's instructions, its tools added to the session's."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..loop import RunOptions
from ..loop.ports import RunPorts, ToolBoard
from ..memory import Memory, open_memory
from ..results import ToolSpec
from ..tools import Tool, ToolHost

if TYPE_CHECKING:
    from ..agent import Agent
    from ._runtime import Runtime


def memory_of(agent: Agent[Any, Any], options: RunOptions) -> Memory | None:
    """The memory a run gets: its options', else its agent's, else (a child
    run) what its parent's passes on (`Memory.for_child`: read-only unless
    the parent's says otherwise)."""
    memory = options.memory
    if memory is None:
        memory = agent.memory
    if memory is None and options.is_child:
        parent = options.parent_memory
        memory = parent.for_child() if isinstance(parent, Memory) else None
    if memory is not None and not isinstance(memory, Memory):
        raise ConfigurationError(
            f"RunOptions(memory={memory!r}): memory must be a taskloom.memory.Memory or None"
        )
    return memory


async def with_memory(
    runtime: Runtime, agent: Agent[Any, Any], ports: RunPorts, options: RunOptions, run_id: str
) -> tuple[Agent[Any, Any], RunPorts, RunOptions, AbstractContextManager[None]]:
    """The agent, ports and options of run `run_id` with its memory: the
    agent's instructions followed by the blocks as the store holds them now,
    the memory tools beside the session's, the memory in the options (so the
    run's children see it); and what to hold open while the run runs (its
    tools' calls reach its memory meanwhile). Unchanged for a run without memory."""
    memory = memory_of(agent, options)
    if memory is None:
        return agent, ports, options, nullcontext()
    store = memory.store if memory.store is not None else runtime.backend.memory
    if store is None:
        raise ConfigurationError(
            f"agent {agent.name!r} has a memory but the runtime's backend keeps none "
            "(give Memory(store=...) or a backend with a memory store)"
        )
    opened = await open_memory(memory, store)
    run_agent = agent.replace(instructions=opened.instructions(agent.instructions))
    board = MemoryTools(ports.tools, opened.tools(), agent.name)
    if options.memory is not memory:
        # A copy: the caller's options may serve other runs.
        options = copy.copy(options)
        options.memory = memory
    return run_agent, ports._replace(tools=board), options, opened.serving(run_id)


class MemoryTools:
    """A session's tool board with a run's memory tools beside its own."""

    __slots__ = ("_agent", "_extra", "_inner", "_seen", "_specs", "_tools")

    def __init__(self, inner: ToolBoard, extra: Sequence[Tool], agent: str) -> None:
        self._inner = inner
        self._extra = {t.name: t for t in extra}
        self._agent = agent
        self._seen: Mapping[str, Tool] | None = None
        self._tools: Mapping[str, Tool] = {}
        self._specs: tuple[ToolSpec, ...] = ()
        self._merge()

    def _merge(self) -> None:
        inner = self._inner.tools
        if inner is self._seen:
            return
        clash = sorted(set(inner) & set(self._extra))
        if clash:
            raise ConfigurationError(
                f"agent {self._agent!r} has tools named like its memory's: {clash}"
            )
        self._tools = {**inner, **self._extra}
        self._specs = (*self._inner.tool_specs, *(t.spec for t in self._extra.values()))
        self._seen = inner

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The session's tools and the memory's, by name."""
        return self._tools

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is told about them."""
        return self._specs

    async def refresh_tools(self) -> None:
        """Re-read the session's toolsets (the memory's tools never change in a run)."""
        await self._inner.refresh_tools()
        self._merge()

    @property
    def host(self) -> ToolHost:
        """The runtime, as tools reach it."""
        return self._inner.host
