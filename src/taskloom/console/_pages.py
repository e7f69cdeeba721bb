"""The console's pages: the sessions table, one session's page, and their
live updates.

A page that may change carries the signature of what it showed, and its
event stream (SSE) sends one `changed` event as soon as the store says
otherwise, then ends; the browser reconnects by itself with the new
signature (`Last-Event-ID`). Polling the log's last position works on every
store (SQLite has no notifications) and costs one indexed read per session
per tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..backends import BackgroundActivity, BackgroundNotice, session_lease_key
from ..background import BackgroundService
from ..entries import Entry, EntryKind
from ..errors import SessionNotFound
from ..log import SessionLog, pending_inputs
from ..results import PendingInput
from ..runtime import FORKED_FROM
from ._memory import memory_views
from ._read import (
    STATUSES,
    Item,
    PendingView,
    SessionSummary,
    parked_calls,
    summarize,
    transcript,
    undecided_calls,
)
from ._shared import ConsoleShared
from ._timeline import build_timeline, to_svg
from ._tree import LogCache, delegation_tree

PAGE_SIZE = 25
SCAN_LIMIT = 2000
"""The newest sessions the table looks through (filters apply within them)."""
STREAM_SECONDS = 25.0
"""An event stream without news ends after this long; the browser reconnects."""


@dataclass(slots=True)
class BackgroundView:
    """A session's background work: running activities, notices not yet
    delivered (with their output tail), and those the model was shown."""

    running: list[BackgroundActivity] = field(default_factory=list)
    pending: list[BackgroundNotice] = field(default_factory=list)
    delivered: list[Item] = field(default_factory=list)
    problem: str = ""


class SessionPages(ConsoleShared):
    """The console's pages and their event streams."""

    async def _sessions_page(self, request: Request) -> Response:
        q = request.query_params
        status = q.get("status", "")
        status = status if status in STATUSES else ""
        agent = q.get("agent", "").strip()
        scope = "all" if q.get("scope") == "all" else "top"
        try:
            page = max(1, int(q.get("page", "1")))
        except ValueError:
            page = 1
        metas = await self.store.list(agent=agent or None, limit=SCAN_LIMIT)
        agents = sorted({m.agent for m in metas if m.agent})
        if scope == "top":
            metas = [m for m in metas if not m.parent_id]
        rows: list[SessionSummary] = []
        skip = (page - 1) * PAGE_SIZE
        matched = 0
        more = False
        for meta in metas:
            summary = None
            if status:
                summary = await summarize(self.store, meta, await self.store.load(meta.id))
                if summary.status != status:
                    continue
            matched += 1
            if matched <= skip:
                continue
            if len(rows) == PAGE_SIZE:
                more = True
                break
            if summary is None:
                summary = await summarize(self.store, meta, await self.store.load(meta.id))
            rows.append(summary)
        watch = ",".join(r.meta.id for r in rows)
        since = await self._list_signature([r.meta.id for r in rows])
        filters = {"status": status, "agent": agent, "scope": scope}
        return self._render(
            "sessions.html",
            rows=rows,
            agents=agents,
            filters=filters,
            page=page,
            more=more,
            page_url=lambda n: "/?" + _query({**filters, "page": str(n)}),
            live_url="/live?" + _query({"watch": watch, "since": since}),
        )

    async def _list_signature(self, watched: list[str]) -> str:
        newest = await self.store.list(limit=1)
        parts: list[object] = [newest[0].id if newest else ""]
        for session_id in watched:
            parts.append(await self._position(session_id))
            parts.append(await self._lease_held(session_id))
        return _digest(parts)

    async def _sessions_live(self, request: Request) -> Response:
        watched = [s for s in request.query_params.get("watch", "").split(",") if s][:PAGE_SIZE]
        return self._stream(request, lambda: self._list_signature(watched))

    async def _session_page(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        cache = LogCache(self.runtime)
        try:
            meta = await cache.meta(session_id)
        except SessionNotFound:
            return self._not_found(session_id)
        entries = await cache.entries(session_id)
        log = SessionLog.folded(entries)
        summary = await summarize(self.store, meta, entries)
        items = transcript(entries)
        tree = await delegation_tree(cache, session_id)
        try:
            run = int(request.query_params["run"])
        except (KeyError, ValueError):
            run = None
        timeline, run_index, runs = await build_timeline(cache, session_id, run)
        svg = Markup(to_svg(timeline)) if timeline is not None else None
        since = await self._session_signature(session_id)
        return self._render(
            "session.html",
            meta=meta,
            summary=summary,
            items=items,
            tree=tree,
            svg=svg,
            ran_by=timeline.by if timeline is not None else "",
            run_index=run_index,
            runs=runs,
            pending=parked_calls(log),
            escalated=await _escalated(cache, log),
            questions=[_question(q) for q in pending_inputs(entries)],
            parked=bool(log.parked()),
            background=await self._background_view(session_id, items),
            memory=await memory_views(self.runtime.backend.memory, entries),
            flash=self._flash.pop(session_id, []),
            running_here=session_id in self._runs,
            forked_from=_origin(meta.metadata.get(FORKED_FROM)),
            workflow=self._workflow_id(session_id, entries),
            sid=quote(session_id, safe=""),
            live_url=f"/sessions/{quote(session_id, safe='')}/live?" + _query({"since": since}),
            now=time.time(),
        )

    def _workflow_id(self, session_id: str, entries: list[Entry]) -> str | None:
        """The session's Temporal workflow id when the console's runtime queues
        on Temporal (a background child's own workflow when its log says it
        was dispatched), else None."""
        if self.runtime.queue is None:
            return None
        from ..distributed import TemporalQueue

        queue = self.runtime.queue
        if not isinstance(queue, TemporalQueue):
            return None
        # A fork keeps the entries it was cut from (a dispatched child's
        # among them) but runs as a session of its own.
        kinds = {e.kind for e in entries}
        child = EntryKind.SUBAGENT_DISPATCHED in kinds and EntryKind.FORK_LINK not in kinds
        return queue.workflow_id(session_id, background_child=child)

    async def _background_view(self, session_id: str, items: list[Item]) -> BackgroundView:
        view = BackgroundView(delivered=[i for i in items if i.kind == "notice"])
        try:
            service = self._service()
            view.running = await service.registry.list(session_id)
            view.pending = await service.inbox.pending(session_id)
        except Exception as exc:
            # The log still shows everything delivered; say why the rest is missing.
            view.problem = f"background state could not be read: {type(exc).__name__}: {exc}"
        return view

    def _service(self) -> BackgroundService:
        # The runtime's own service, on the store's backend: the runtime
        # releases it when it closes.
        if self._background is None:
            self._background = BackgroundService.of(self.runtime)
        return self._background

    async def _session_signature(self, session_id: str) -> str:
        parts: list[object] = [session_id in self._runs, await self._lease_held(session_id)]
        todo = [session_id]
        seen: set[str] = set()
        while todo and len(seen) < 200:
            sid = todo.pop()
            if sid in seen:
                continue
            seen.add(sid)
            parts.append((sid, await self._position(sid)))
            todo.extend(m.id for m in await self.store.list(parent_id=sid))
        with contextlib.suppress(Exception):
            service = self._service()
            parts.append(sorted(a.id for a in await service.registry.list(session_id)))
            parts.append(sorted(n.id for n in await service.inbox.pending(session_id)))
        return _digest(parts)

    async def _session_live(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        return self._stream(request, lambda: self._session_signature(session_id))

    async def _position(self, session_id: str) -> int:
        """The session's last log position, read incrementally (-1 once it is gone)."""
        known = self._positions.get(session_id, 0)
        try:
            fresh = await self.store.load(session_id, after=known)
        except SessionNotFound:
            self._positions.pop(session_id, None)
            return -1
        if fresh:
            known = self._positions[session_id] = fresh[-1].position
        return known

    async def _lease_held(self, session_id: str) -> bool:
        return await self.store.leases.current(session_lease_key(session_id)) is not None

    def _stream(self, request: Request, signature: Callable[[], Awaitable[str]]) -> Response:
        shown = request.headers.get("last-event-id") or request.query_params.get("since", "")
        retry = max(100, int(self.poll_interval * 1000))

        async def events() -> AsyncIterator[str]:
            loop = asyncio.get_running_loop()
            give_up = loop.time() + STREAM_SECONDS
            yield f"retry: {retry}\n\n"
            while not self._closing:
                current = await signature()
                if current != shown:
                    yield f"id: {current}\nevent: changed\ndata: {current}\n\n"
                    return
                if loop.time() >= give_up:
                    return
                yield ": waiting\n\n"
                await asyncio.sleep(self.poll_interval)

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"x-accel-buffering": "no"}
        )


def _query(params: Mapping[str, str]) -> str:
    return "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in params.items() if v)


def _origin(value: object) -> tuple[str, int] | None:
    """(session id, position) of a fork's origin, when its metadata names one."""
    if isinstance(value, Mapping):
        session_id, position = value.get("session_id"), value.get("position")
        if isinstance(session_id, str) and isinstance(position, int):
            return session_id, position
    return None


def _digest(parts: list[object]) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class _Escalated:
    """A child's calls escalated to the page's session and still undecided."""

    id: str
    name: str
    calls: list[PendingView]


async def _escalated(cache: LogCache, log: SessionLog) -> list[_Escalated]:
    out = []
    for child_id, escalated in log.escalated.items():
        try:
            entries = await cache.entries(child_id)
        except SessionNotFound:
            continue  # a deleted child's calls wait for nobody
        calls = undecided_calls(SessionLog.folded(entries))
        if calls:
            out.append(_Escalated(child_id, escalated.name, calls))
    return out


@dataclass(frozen=True, slots=True)
class _Field:
    """One field of a question's form."""

    name: str
    kind: str  # text, number, integer, boolean, choice
    title: str
    required: bool
    choices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Question:
    """A question an MCP task asked, as its form shows it."""

    id: str
    message: str
    source: str
    url: str | None
    fields: list[_Field]


def _question(asked: PendingInput) -> _Question:
    schema = asked.schema or {}
    required = set(schema.get("required") or ())
    fields = []
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, Mapping) else {}
        choices = tuple(str(c) for c in prop.get("enum") or ())
        kind = "choice" if choices else str(prop.get("type", "string"))
        if kind not in ("number", "integer", "boolean", "choice"):
            kind = "text"
        title = str(prop.get("title") or prop.get("description") or name)
        fields.append(_Field(str(name), kind, title, name in required, choices))
    # Only a web address is a link: a server's `javascript:` is shown as text.
    url = asked.url if asked.url and asked.url.startswith(("https://", "http://")) else None
    return _Question(asked.id, asked.message, asked.source, url, fields)
