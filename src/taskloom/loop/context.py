"""What a running tool can reach: its identity, the run's controls, deferred results."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events import Event, ToolProgress
from ..stores.base import Entry, EntryKind
from .options import RunOptions, StopSignal

if TYPE_CHECKING:
    from ..agent import Agent
    from ..runtime import Runtime, Session

__all__ = ["Deferred", "DeferredItem", "ToolContext"]


@dataclass(frozen=True, slots=True)
class DeferredItem:
    """Something a tool's work delivers to the model later.

    Build with `context(text)`, `delegation_result(content, artifact, edge)`
    or `subagent_finished(id, status)`.
    """

    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def context(cls, text: str) -> DeferredItem:
        """Plain text for the model's context."""
        return cls("context", {"text": text})

    @classmethod
    def delegation_result(
        cls,
        content: str,
        artifact: Mapping[str, Any] | None = None,
        edge: Mapping[str, Any] | None = None,
    ) -> DeferredItem:
        """A delegated task's answer, with its artifact record and (parent, child) edge."""
        return cls(
            "delegation_result",
            {"content": content, "artifact": dict(artifact or {}), "edge": dict(edge or {})},
        )

    @classmethod
    def subagent_finished(cls, id: str, status: str) -> DeferredItem:
        """A child agent reached a terminal status."""
        return cls("subagent_finished", {"id": id, "status": status})

    def render(self) -> str:
        """The text the model reads for this item."""
        d = self.data
        if self.kind == "context":
            return str(d.get("text", ""))
        if self.kind == "delegation_result":
            artifact = d.get("artifact") or {}
            who = (
                artifact.get("agent_id")
                or (d.get("edge") or {}).get("child")
                or "a delegated agent"
            )
            return f"[delegation result from {who}]\n{d.get('content', '')}"
        if self.kind == "subagent_finished":
            return f"[subagent {d.get('id')} finished with status {d.get('status')}]"
        return f"[{self.kind}] {dict(d)}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value."""
        return {"kind": self.kind, "data": dict(self.data)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeferredItem:
        """The value `to_dict` described."""
        return cls(d["kind"], d.get("data") or {})


class Deferred:
    """A handle a tool can keep after it returned, to deliver items later.

    Items are written to the session's log at once (durable) and applied at
    the run's next round boundary, in push order, before the model is asked.
    The handle pickles to its identity only (session id and handle id); after
    unpickling, `bind(runtime)` reconnects it.
    """

    __slots__ = ("_runtime", "id", "run_id", "session_id")

    def __init__(
        self,
        session_id: str,
        *,
        runtime: Runtime | None = None,
        id: str | None = None,
        run_id: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.id = id or uuid.uuid4().hex
        self.run_id = run_id
        self._runtime = runtime

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_deferred, (self.session_id, self.id, self.run_id))

    def bind(self, runtime: Runtime) -> Deferred:
        """Attach the runtime whose store the items go to."""
        self._runtime = runtime
        return self

    async def push(self, item: DeferredItem | str) -> int:
        """Write the item to the session log; returns its position."""
        if self._runtime is None:
            raise RuntimeError("this Deferred is not bound to a runtime: call bind(runtime) first")
        if isinstance(item, str):
            item = DeferredItem.context(item)
        entry = Entry(
            EntryKind.DEFERRED, {"deferred_id": self.id, "item": item.to_dict()}, self.run_id
        )
        position = await self._runtime.store.append(self.session_id, entry)
        self._runtime._notify(self.session_id)
        return position

    def __repr__(self) -> str:
        return f"Deferred(session_id={self.session_id!r}, id={self.id!r})"


def _rebuild_deferred(session_id: str, id: str, run_id: str | None) -> Deferred:
    return Deferred(session_id, id=id, run_id=run_id)


class ToolContext:
    """Injected into a tool when a parameter is annotated `ToolContext`."""

    __slots__ = (
        "_emit",
        "_loop",
        "_thread",
        "agent",
        "call_id",
        "options",
        "origin",
        "run_id",
        "runtime",
        "session",
        "session_id",
    )

    def __init__(
        self,
        *,
        run_id: str,
        session_id: str,
        call_id: str,
        agent: Agent,
        runtime: Runtime,
        session: Session,
        options: RunOptions,
        emit: Callable[[Event], None],
        origin: str = "",
    ) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self.call_id = call_id
        self.agent = agent
        self.runtime = runtime
        self.session = session
        self.options = options
        self.origin = origin
        self._emit = emit
        # Sync tools run in a worker thread; events they emit must reach the
        # subscribers through the event loop, not from that thread.
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()

    @property
    def stop(self) -> StopSignal:
        """The run's stop signal (set when the run is asked to stop)."""
        return self.options.stop

    def emit(self, event: Event) -> None:
        """Send an event to the run's subscribers (safe from a sync tool's thread)."""
        if threading.get_ident() == self._thread:
            self._emit(event)
        else:
            self._loop.call_soon_threadsafe(self._emit, event)

    def progress(self, message: str, **data: Any) -> None:
        """Report progress to subscribers at once; never causes a model round."""
        self.emit(
            ToolProgress(
                call_id=self.call_id,
                message=message,
                data=data,
                origin=self.origin,
                session_id=self.session_id,
            )
        )

    def deferred(self) -> Deferred:
        """A handle to deliver results to this session after the call returned."""
        return Deferred(self.session_id, runtime=self.runtime, run_id=self.run_id)

    async def start_background(self, kind: str, description: str, work: Any, **options: Any) -> str:
        """Start background work whose result reaches the model as a notice at a
        later round boundary; returns the activity id at once."""
        return await self.runtime.background.start(self, kind, description, work, **options)
