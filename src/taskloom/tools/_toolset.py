"""Toolsets: tools that come from elsewhere (an MCP server) and may change
between rounds. A session re-reads them at every round boundary, never in a
round, so a turn's calls run with the tools the model was offered for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

from ..errors import ConfigurationError
from ..results import ToolSpec
from ._context import ToolHost
from ._tool import Tool


@runtime_checkable
class Toolset(Protocol):
    """A source of tools whose list may change between rounds (an MCP server).

    `current_tools(host)` is asked at every round boundary of every run that
    uses it: it answers from a cache (no I/O) with the *same* sequence object
    while nothing changed, a new object being how it says "the list changed".
    It raises `ConfigurationError` when the tools cannot be had at all (a
    server that does not start). `name` is how errors name it.
    """

    @property
    def name(self) -> str:
        """How messages name this toolset."""
        ...

    async def current_tools(self, host: ToolHost) -> Sequence[Tool]:
        """The tools to offer from this round on (the same object while unchanged)."""
        ...


class ToolProvider(Protocol):
    """Anything that makes a tool: a `SubAgent`, the spawn tool's `Spawner`."""

    def tool(self) -> Tool:
        """The tool to offer."""
        ...


ToolLike: TypeAlias = "Tool | Toolset | ToolProvider | Callable[..., Any]"
"""What an agent's `tools=` list holds: a `Tool`, a `Toolset` (an MCP
server), anything with a `.tool()` method, or a plain function (made a tool
as `@tool` would)."""


class ToolCatalog:
    """The tools one session offers: its agent's own tools and its toolsets'
    current ones, by name.

    `refresh(host)` re-reads the toolsets (at a round boundary); `tools` and
    `specs` stay as they are between refreshes. Two tools with one name,
    wherever they come from, are a `ConfigurationError` naming both.
    """

    __slots__ = ("_agent", "_lists", "_own", "_toolsets", "specs", "tools")

    def __init__(self, agent: str, own: Sequence[Tool], toolsets: Sequence[Toolset]) -> None:
        self._agent = agent
        self._own = tuple(own)
        self._toolsets = tuple(toolsets)
        self._lists: tuple[Sequence[Tool], ...] | None = None
        self.tools: Mapping[str, Tool] = {t.name: t for t in self._own}
        self.specs: tuple[ToolSpec, ...] = tuple(t.spec for t in self._own)

    async def refresh(self, host: ToolHost) -> bool:
        """Re-read the toolsets; True when the offered tools changed."""
        if len(self._toolsets) == 1:
            lists: tuple[Sequence[Tool], ...] = (await self._toolsets[0].current_tools(host),)
        else:
            # Together: servers that start on first use start side by side.
            lists = tuple(await asyncio.gather(*(ts.current_tools(host) for ts in self._toolsets)))
        previous = self._lists
        if previous is not None and all(a is b for a, b in zip(lists, previous, strict=True)):
            return False
        by_name: dict[str, Tool] = {}
        source: dict[str, str] = {}
        named = [
            (f"{type(ts).__name__} {ts.name!r}", tools)
            for ts, tools in zip(self._toolsets, lists, strict=True)
        ]
        for origin, tools in (("the agent's own tools", self._own), *named):
            for t in tools:
                if t.name in by_name:
                    raise ConfigurationError(
                        f"agent {self._agent!r} is offered two tools named {t.name!r}: "
                        f"one from {source[t.name]}, one from {origin} "
                        "(give a toolset a prefix=, or rename one)"
                    )
                by_name[t.name] = t
                source[t.name] = origin
        self.tools = by_name
        self.specs = tuple(t.spec for t in by_name.values())
        self._lists = lists
        return True
