"""What a run needs of its session besides the journal: which model its next
request goes to (`SessionModel`) and which tools it offers (`SessionTools`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .. import entries as log_entries
from .._redact import safe_urls
from ..models import Model, ModelSettings, ReasoningOptions
from ..results import ToolSpec
from ..tools import ToolCatalog

if TYPE_CHECKING:
    from ..agent import Agent
    from ..tools import Tool
    from ._journal import SessionJournal
    from ._runtime import Runtime


class SessionModel:
    """A session's model choice, read from and written to its journal (the
    loop's `taskloom.loop.ports.ModelChoice`)."""

    __slots__ = ("_agent", "_chosen", "_journal", "_log", "_runtime")

    def __init__(self, runtime: Runtime, agent: Agent[Any, Any], journal: SessionJournal) -> None:
        self._runtime = runtime
        self._agent = agent
        self._journal = journal
        self._log = journal.log
        # A model instance chosen in this process, and the log position of the
        # model change that chose it: instances keep their identity here even
        # when two share a spec (other processes resolve the spec).
        self._chosen: tuple[int, Model] | None = None

    @property
    def model(self) -> Model:
        """The model the next request goes to (the persisted choice, else the agent's)."""
        log = self._log
        spec = log.model_spec
        if spec is None:
            return self._runtime.resolve_model(self._agent.model)
        chosen = self._chosen
        if chosen is not None and chosen[0] == log.model_position:
            return chosen[1]
        agent_model = self._agent.model
        if not isinstance(agent_model, str) and agent_model.spec == spec:
            return agent_model
        return self._runtime.resolve_model(spec)

    @property
    def settings(self) -> ModelSettings:
        """The agent's settings with the session's persisted reasoning choice."""
        base = self._agent.settings
        log = self._log
        if not log.reasoning_set:
            return base
        return replace(base, reasoning=log.reasoning)

    def resolve_model(self, spec: Model | str) -> Model:
        """A model instance for a spec, through the runtime's registry."""
        return self._runtime.resolve_model(spec)

    async def set_model(self, model: Model | str) -> None:
        """Use another model from the next request on; persisted on the session.

        An instance is used as given in this process (even if another has
        the same spec); other processes resolve its spec. A spec whose URL
        carries credentials is resolved here and stored without them.
        """
        if isinstance(model, str) and safe_urls(model) != model:
            # A spec with credentials in its URL (`openai:m@https://me:pw@host`)
            # is never stored: the model is made here, kept by this runtime
            # under its credential-free spec, which is what the log holds.
            model = self._runtime.resolve_model(model)
        spec = model if isinstance(model, str) else model.spec
        position = await self._journal.record(
            log_entries.ModelChange(model=spec, model_changed=True)
        )
        if isinstance(model, str):
            self._chosen = None
        else:
            self._chosen = (position, model)
            self._runtime.adopt_model(model)

    async def set_reasoning(self, reasoning: ReasoningOptions | None) -> None:
        """Set (or clear, with None) reasoning options; persisted on the session."""
        await self._journal.record(
            log_entries.ModelChange(
                reasoning=reasoning.to_dict() if reasoning else None, reasoning_changed=True
            )
        )


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
