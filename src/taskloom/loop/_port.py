"""The ports the round loop talks through: its session and background notices.

The loop defines what it needs as small protocols; the runtime (for the
session) and the background service (for notices) implement them. So the
loop knows nothing of runtimes, stores or background work, and a test can
drive it with anything that has these methods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..entries import Entry
from ..messages import Message
from ..models._base import Model, ModelSettings, ReasoningOptions
from ..results import ToolSpec
from ..tools import AgentView, Tool, ToolHost

if TYPE_CHECKING:
    from ._compact import Compaction
    from ._log import SessionLog

__all__ = ["AgentSpec", "Delivery", "NoticesPort", "RunNoticesPort", "SessionPort"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """Text for the model and the notice ids to ack once it is persisted.

    `ack_ids` may be empty: a line about running work acknowledges nothing.
    """

    text: str
    ack_ids: tuple[str, ...] = ()

    def merged(self, other: Delivery) -> Delivery:
        """One delivery carrying both texts and both sets of ids."""
        return Delivery(self.text + "\n" + other.text, (*self.ack_ids, *other.ack_ids))


class AgentSpec(AgentView, Protocol):
    """What the loop reads of the agent definition (a `taskloom.Agent`)."""

    @property
    def instructions(self) -> str | None:
        """The system prompt."""
        ...

    @property
    def fixes(self) -> int:
        """Corrective rounds allowed for an answer that fails the output schema."""
        ...

    @property
    def output_schema(self) -> object:
        """The output schema, if any (None: free text)."""
        ...

    @property
    def output_json_schema(self) -> Mapping[str, object] | None:
        """The output schema as JSON schema."""
        ...

    @property
    def output_name(self) -> str:
        """A name for the structured output."""
        ...

    @property
    def compaction(self) -> Compaction | None:
        """When and how long sessions are compacted (None: never)."""
        ...

    def parse_output(self, text: str) -> object:
        """The final answer validated against the output schema (ValueError says why not)."""
        ...


class RunNoticesPort(Protocol):
    """What one run delivers about background work, and when (see `RunNotices`)."""

    async def round_start(self) -> Delivery | None:
        """Notices for the start of a round."""
        ...

    async def before_final(self) -> Delivery | None:
        """Unseen completions and reminders before the run may end."""
        ...

    def take_seen(self) -> list[str]:
        """Notice ids a tool showed the model itself, to ack with its results."""
        ...


class NoticesPort(Protocol):
    """Background notices of a runtime, as the loop sees them."""

    def run_notices(self, session_id: str, run_id: str) -> RunNoticesPort:
        """The notices of one run."""
        ...

    async def ack(self, session_id: str, ids: Sequence[str]) -> None:
        """Acknowledge notices the model has now seen (persisted)."""
        ...

    def run_ended(self, run_id: str) -> None:
        """Forget the run's per-run state."""
        ...


class SessionPort(Protocol):
    """The session a run belongs to, as the loop sees it.

    `append` is for the run's own entries: they carry the run's fencing
    token, and the store refuses them once another run holds the session.
    """

    @property
    def id(self) -> str:
        """The session id."""
        ...

    @property
    def agent(self) -> AgentSpec:
        """The agent definition."""
        ...

    @property
    def host(self) -> ToolHost:
        """The runtime, as tools reach it."""
        ...

    @property
    def log(self) -> SessionLog:
        """The session's log as folded so far (a cache of the store)."""
        ...

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools offered, by name (as of the last `refresh_tools`)."""
        ...

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is told about the tools."""
        ...

    async def refresh_tools(self) -> None:
        """Re-read the agent's toolsets; called at round boundaries only."""
        ...

    @property
    def model(self) -> Model:
        """The model the next request goes to."""
        ...

    @property
    def settings(self) -> ModelSettings:
        """The model settings for the next request."""
        ...

    @property
    def notices(self) -> NoticesPort:
        """Background notices of the session's runtime."""
        ...

    async def sync(self) -> None:
        """Fold in entries other tasks or processes appended since the last look."""
        ...

    async def append(self, entry: Entry, message: Message | None = None) -> int:
        """Append an entry of the run (fenced) and fold it in; returns its position.

        `message` is the already-built message of a message entry.
        """
        ...

    async def set_model(self, model: Model | str) -> None:
        """Persist a model change."""
        ...

    async def set_reasoning(self, reasoning: ReasoningOptions | None) -> None:
        """Persist a reasoning change."""
        ...

    def resolve_model(self, spec: Model | str) -> Model:
        """A model instance for a spec (a summarizer named by spec, ...)."""
        ...
