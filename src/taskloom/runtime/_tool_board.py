"""The tools a session offers: its agent's own, and its toolsets' as last read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..results import ToolSpec
from ..tools import ToolCatalog

if TYPE_CHECKING:
    from ..agent import Agent
    from ..tools import Tool
    from ._runtime import Runtime

__all__ = ["SessionTools"]


class SessionTools:
    """The tools of a session's agent on a runtime, as the loop's tool board
    reads them (`taskloom.loop.ports.ToolBoard`)."""

    __slots__ = ("_agent", "_catalog", "_own", "_runtime")

    def __init__(self, runtime: Runtime, agent: Agent[Any, Any]) -> None:
        self._runtime = runtime
        self._agent = agent
        # The agent's own tools, bound to the runtime where they need it.
        self._own = runtime.tools_for(agent)
        # Made on the first refresh of an agent with toolsets.
        self._catalog: ToolCatalog | None = None

    @property
    def host(self) -> Runtime:
        """The runtime, as tools reach it."""
        return self._runtime

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools offered, by name: the agent's own, and its toolsets' as of
        the last `refresh_tools()`."""
        catalog = self._catalog
        return self._own if catalog is None else catalog.tools

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is told about the tools (rebuilt only when they change)."""
        catalog = self._catalog
        return self._agent.tool_specs if catalog is None else catalog.specs

    async def refresh_tools(self) -> None:
        """Re-read the agent's toolsets (an MCP server's current tools); the
        loop calls it at round boundaries, so a tool list never changes
        within a round. Free for an agent without toolsets."""
        agent = self._agent
        if not agent.toolsets:
            return
        catalog = self._catalog
        if catalog is None:
            catalog = self._runtime.catalog_for(agent)
        await catalog.refresh(self._runtime)
        self._catalog = catalog
