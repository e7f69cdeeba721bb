"""Which model a session's next request goes to: the persisted choice, else its agent's."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .._redact import safe_urls
from ..entries import ModelChange
from ..models import Model, ModelSettings, ReasoningOptions

if TYPE_CHECKING:
    from ..agent import Agent
    from ._journal import SessionJournal
    from ._runtime import Runtime

__all__ = ["SessionModel"]


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
        position = await self._journal.record(ModelChange(model=spec, model_changed=True))
        if isinstance(model, str):
            self._chosen = None
        else:
            self._chosen = (position, model)
            self._runtime.adopt_model(model)

    async def set_reasoning(self, reasoning: ReasoningOptions | None) -> None:
        """Set (or clear, with None) reasoning options; persisted on the session."""
        await self._journal.record(
            ModelChange(
                reasoning=reasoning.to_dict() if reasoning else None, reasoning_changed=True
            )
        )
