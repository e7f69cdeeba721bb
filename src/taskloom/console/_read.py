"""What the console shows, read from a store through the public API only.

Every value here is derived from a session's typed entries (`entry.payload`)
folded by `SessionLog`, plus the session lease for "is a run alive": the
console holds no truth of its own, so any number of consoles (and the CLI)
agree on what they show.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._redact import safe_urls
from ..backends import SessionMeta, SessionStore, session_lease_key
from ..entries import (
    ApprovalDecision,
    ApprovalRequests,
    CallsStarted,
    CompactionEntry,
    DeferredEntry,
    Entry,
    MemoryEdited,
    MessageEntry,
    ModelChange,
    NoticeDeliveredEntry,
    RunFinishedEntry,
    RunStartedEntry,
    Steer,
    StopRequest,
    SubagentDispatched,
    SubagentLink,
    SubagentReport,
    SubagentResult,
    SubagentStartedEntry,
)
from ..errors import CorruptEntry
from ..log import SessionLog, entry_messages
from ..messages import Message

STATUSES = (
    "running",
    "awaiting_approval",
    "completed",
    "failed",
    "stopped",
    "interrupted",
    "budget_exhausted",
    "deadline",
    "queued",
    "new",
)
"""Every status the sessions table shows (and filters by)."""

LONG_CHARS = 1200
LONG_LINES = 16

_SECRET_PARAM = re.compile(
    r"(?i)\b((?:api[_-]?key|access[_-]?token|token|secret|password|passwd|key)=)[^&\s\"']+"
)
_KEY_LIKE = re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_\-]{12,}")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._\-~+/=]{8,}")


def redact(text: str) -> str:
    """`text` with credentials it may carry hidden: URL user info, secret-looking
    query parameters, provider keys and bearer tokens (for model specs, base
    URLs and metadata: configuration a console must never show)."""
    text = safe_urls(text)
    text = _SECRET_PARAM.sub(r"\1***", text)
    text = _KEY_LIKE.sub(r"\1-***", text)
    return _BEARER.sub(r"\1 ***", text)


def fold_long(text: str) -> tuple[str, bool]:
    """(a preview, whether `text` is long enough to show collapsed)."""
    lines = text.splitlines()
    if len(text) <= LONG_CHARS and len(lines) <= LONG_LINES:
        return text, False
    preview = "\n".join(lines[:6])[:400]
    return preview, True


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@dataclass(frozen=True, slots=True)
class RunState:
    """Where a session's runs stand, from its run entries."""

    status: str
    active: bool
    runs: int
    tokens: int


def run_state(entries: Sequence[Entry]) -> RunState:
    """The status the log alone says: the last run's end, "running" while a run
    has started and not finished (the caller checks its lease), "queued" for a
    dispatched child nobody started, else "new"."""
    status, open_run, runs, tokens = "new", False, 0, 0
    for entry in entries:
        payload = entry.payload
        if isinstance(payload, RunStartedEntry):
            open_run, runs = True, runs + 1
            status = "running"
        elif isinstance(payload, RunFinishedEntry):
            open_run = False
            status = payload.status.value
            tokens += payload.usage.total_tokens
        elif isinstance(payload, SubagentDispatched) and runs == 0:
            status = "queued"
    return RunState(status, open_run, runs, tokens)


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One row of the sessions table."""

    meta: SessionMeta
    name: str
    status: str
    model: str
    last_activity: float
    tokens: int
    pending: int
    position: int


def display_name(meta: SessionMeta) -> str:
    """What a session is called on screen: a child's name, else its agent."""
    name = meta.metadata.get("name")
    return str(name) if isinstance(name, str) and name else (meta.agent or "session")


def last_model(log: SessionLog) -> str:
    """The model that answered last (a persisted choice if none answered yet)."""
    for message in reversed(log.messages):
        if message.role == "assistant" and message.model:
            return redact(
                f"{message.provider}:{message.model}" if message.provider else message.model
            )
    return redact(log.model_spec or "")


async def summarize(
    store: SessionStore, meta: SessionMeta, entries: Sequence[Entry]
) -> SessionSummary:
    """The row of session `meta` whose log is `entries`."""
    log = SessionLog.folded(entries)
    state = run_state(entries)
    status = state.status
    if state.active:
        held = await store.leases.current(session_lease_key(meta.id))
        status = "running" if held is not None else "interrupted"
    last = entries[-1].created_at if entries else meta.created_at
    pending = len(undecided_calls(log))
    return SessionSummary(
        meta, display_name(meta), status, last_model(log), last, state.tokens, pending, log.position
    )


@dataclass(frozen=True, slots=True)
class PendingView:
    """A parked call: exactly what a decision on it binds to."""

    call_id: str
    name: str
    arguments: str
    hash: str
    decided: str | None = None
    note: str | None = None


def parked_calls(log: SessionLog) -> list[PendingView]:
    """The calls of the parked turn that asked for approval, each with its
    decision when one was recorded (decided calls wait for a resume)."""
    out = []
    for call in log.pending_calls():
        request = log.request(call.id)
        assert request is not None  # pending_calls are the requested ones
        decision = log.decision(call.id)
        verdict = None if decision is None else ("approved" if decision.approved else "denied")
        note = None if decision is None else decision.note
        arguments = _json(dict(request.arguments))
        out.append(PendingView(call.id, call.name, arguments, request.hash, verdict, note))
    return out


def undecided_calls(log: SessionLog) -> list[PendingView]:
    """The calls of the parked turn still awaiting a decision."""
    return [view for view in parked_calls(log) if view.decided is None]


@dataclass(frozen=True, slots=True)
class ChildRef:
    """A child session a call created."""

    session_id: str
    name: str
    mode: str


@dataclass(frozen=True, slots=True)
class CallView:
    """A tool call as the model made it."""

    id: str
    name: str
    arguments: str
    children: tuple[ChildRef, ...] = ()


@dataclass(frozen=True, slots=True)
class ResultView:
    """A tool result, folded when long."""

    call_id: str
    tool_name: str
    content: str
    is_error: bool
    preview: str
    is_long: bool


@dataclass(slots=True)
class Item:
    """One thing in the transcript, at the log position where it landed.

    `kind` picks how it is drawn: `message` (role, text, reasoning, calls,
    results) or a mark (`steer`, `deferred`, `notice`, `approval`, `decision`,
    `run`, `stop`, `model`, `child`, `entry`).
    """

    kind: str
    position: int
    created_at: float
    title: str = ""
    text: str = ""
    role: str = ""
    origin: str = ""
    model: str = ""
    thinking: list[str] = field(default_factory=list)
    calls: list[CallView] = field(default_factory=list)
    results: list[ResultView] = field(default_factory=list)
    link: str = ""
    css: str = ""

    @property
    def preview(self) -> tuple[str, bool]:
        """`text` folded when long."""
        return fold_long(self.text)


def _message_item(entry: Entry, message: Message, links: Mapping[str, list[ChildRef]]) -> Item:
    calls = [
        CallView(
            c.id,
            c.name,
            c.raw_arguments if c.raw_arguments is not None else _json(c.arguments),
            tuple(links.get(c.id, ())),
        )
        for c in message.tool_calls
    ]
    results = []
    for r in message.results:
        preview, is_long = fold_long(r.content)
        results.append(
            ResultView(r.tool_call_id, r.tool_name, r.content, r.is_error, preview, is_long)
        )
    model = ""
    if message.role == "assistant" and message.model:
        model = redact(message.model)
    return Item(
        "message",
        entry.position,
        entry.created_at,
        role=message.role,
        text=message.text,
        origin=message.origin,
        model=model,
        thinking=[
            "(redacted reasoning)" if b.redacted or (not b.text and b.data) else b.text
            for b in message.thinking
        ],
        calls=calls,
        results=results,
    )


MOVED = "moved to background"
"""The mode shown for an inline child whose call answered while it ran on."""


def moved_children(entries: Iterable[Entry]) -> set[str]:
    """The inline children whose call answered while they ran on in the
    background (`SubAgent(background_after=...)`: a `running` report)."""
    return {
        e.payload.child_session_id
        for e in entries
        if isinstance(e.payload, SubagentReport) and e.payload.status == "running"
    }


def child_links(entries: Sequence[Entry]) -> dict[str, list[ChildRef]]:
    """Children each call created, by call id (from the `subagent` link entries)."""
    links: dict[str, list[ChildRef]] = {}
    moved = moved_children(entries)
    for entry in entries:
        payload = entry.payload
        if isinstance(payload, SubagentLink):
            child = payload.child_session_id
            ref = ChildRef(child, payload.name, MOVED if child in moved else payload.mode)
            links.setdefault(payload.call_id, []).append(ref)
    return links


def _marker(items: list[Item], entry: Entry) -> Callable[..., None]:
    def mark(kind: str, title: str, text: str = "", css: str = "", link: str = "") -> None:
        items.append(
            Item(kind, entry.position, entry.created_at, title=title, text=text, css=css, link=link)
        )

    return mark


def transcript(entries: Sequence[Entry]) -> list[Item]:
    """The session's log as transcript items, in log order."""
    links = child_links(entries)
    items: list[Item] = []
    for entry in entries:
        mark = _marker(items, entry)
        try:
            payload = entry.payload
        except CorruptEntry as exc:
            mark("entry", f"{entry.kind} (unreadable)", str(exc))
            continue
        if isinstance(payload, MessageEntry):
            *delivered, message = entry_messages(payload)
            for notices in delivered:
                mark("notice", "background notices delivered with the next answer", notices.text)
            item = _message_item(entry, message, links)
            if payload.folds:
                item.title = "folds in " + ", ".join(f"#{p}" for p in payload.folds)
            items.append(item)
        elif isinstance(payload, Steer):
            mark("steer", "steering", payload.text)
        elif isinstance(payload, DeferredEntry):
            mark("deferred", f"deferred item ({payload.item.kind})", payload.item.render())
        elif isinstance(payload, NoticeDeliveredEntry):
            mark("notice", "background notices delivered", payload.text)
        elif isinstance(payload, StopRequest):
            mark("stop", "stop requested", payload.reason or "")
        elif isinstance(payload, ModelChange):
            parts = []
            if payload.model_changed:
                parts.append(f"model → {redact(payload.model or 'the agent default')}")
            if payload.reasoning_changed:
                parts.append(
                    f"reasoning → {_json(payload.reasoning) if payload.reasoning else 'cleared'}"
                )
            mark("model", "; ".join(parts) or "model settings")
        elif isinstance(payload, ApprovalRequests):
            names = ", ".join(f"{c.name} [{c.call_id}]" for c in payload.calls)
            mark("approval", f"approval requested: {names}")
        elif isinstance(payload, ApprovalDecision):
            verdict = "approved" if payload.approved else "denied"
            mark("decision", f"{verdict} {payload.call_id}", payload.note or "", css=verdict)
        elif isinstance(payload, CallsStarted):
            mark("entry", "calls started: " + ", ".join(payload.call_ids))
        elif isinstance(payload, RunStartedEntry):
            title = "resumed" if payload.resume else "run started"
            title += f" ({payload.agent})" if payload.agent else ""
            mark("run", title + (f" · run by {redact(payload.by)}" if payload.by else ""))
        elif isinstance(payload, RunFinishedEntry):
            title = f"run ended: {payload.status.value} · {payload.rounds} rounds · "
            title += f"{payload.usage.total_tokens} tokens"
            if payload.budget_left is not None:
                title += f" · budget left: {payload.budget_left}"
            mark("run", title, payload.error or "", css=payload.status.value)
        elif isinstance(payload, SubagentLink):
            title = f"delegated to {payload.name} ({payload.mode}) by call {payload.call_id}"
            mark("child", title, payload.task, link=payload.child_session_id)
        elif isinstance(payload, SubagentReport) and payload.status == "running":
            mark("child", "child moved to the background", link=payload.child_session_id)
        elif isinstance(payload, SubagentReport):
            mark("child", f"child ended: {payload.status}", link=payload.child_session_id)
        elif isinstance(payload, SubagentDispatched):
            mark("entry", "dispatched to a worker")
        elif isinstance(payload, SubagentStartedEntry):
            mark("entry", f"child started ({payload.name})" if payload.name else "child started")
        elif isinstance(payload, SubagentResult):
            text = payload.error or ("" if payload.report is None else str(payload.report))
            mark("child", f"child result: {payload.status}", text, css=payload.status)
        elif isinstance(payload, MemoryEdited):
            where = "/".join(payload.namespace)
            title = f"memory {payload.op}: {where} {payload.key} "
            mark("entry", title + f"v{payload.version_before} → v{payload.version_after}")
        elif isinstance(payload, CompactionEntry):
            how = "summarized" if payload.method == "summary" else "left out of the view"
            title = f"compaction: earlier messages {how} (~{payload.tokens_before} → ~{payload.tokens_after} tokens)"
            note = f"\n{payload.note}" if payload.note else ""
            mark("compaction", title, payload.summary + note)
        else:
            # A kind this version does not type (a newer kind): shown by
            # name, its data left unread.
            mark("entry", entry.kind)
    return items
