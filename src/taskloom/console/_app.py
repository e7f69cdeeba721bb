"""The console's Starlette application: pages, live updates, and acting.

Pages are drawn on the server from the store (see `_read`, `_tree`,
`_timeline`); a page that may change carries the signature of what it
showed, and its event stream (SSE) sends one `changed` event as soon as the
store says otherwise, then ends; the browser reconnects by itself with the
new signature (`Last-Event-ID`). Polling the log's last position works on
every store (SQLite has no notifications) and costs one indexed read per
session per tick.

Acting needs the host's runtime (`--app`): decisions, steering and stop
requests are appended to the log like the CLI does; a resume runs in this
process, in a task the console owns and cancels when it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

import jinja2
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._serving import MAX_FORM_BODY, BodyLimit
from ..agent import Agent
from ..background import BackgroundActivity, BackgroundNotice, BackgroundService
from ..delegation import DecidedChildren
from ..entries import SubagentDispatched
from ..errors import SessionNotFound, TaskloomError, UsageError
from ..log import SessionLog, pending_inputs
from ..models import FunctionModel, ModelRequest
from ..results import PendingInput
from ..runtime import (
    FORKED_FROM,
    Runtime,
    Session,
    fork_session,
    resume_decided,
    session_lease_key,
)
from ..stores import SessionStore
from ._auth import AccessGuard, new_token
from ._read import (
    STATUSES,
    Item,
    PendingView,
    SessionSummary,
    now,
    parked_calls,
    summarize,
    transcript,
    undecided_calls,
)
from ._timeline import build_timeline, to_svg
from ._tree import LogCache, delegation_tree

__all__ = ["Console"]

logger = logging.getLogger("taskloom.console")

HERE = Path(__file__).parent
PAGE_SIZE = 25
SCAN_LIMIT = 2000
"""The newest sessions the table looks through (filters apply within them)."""
STREAM_SECONDS = 25.0
"""An event stream without news ends after this long; the browser reconnects."""
TAIL_LINES = 20

READ_ONLY = (
    "read-only: this console was started without --app module:factory, so it has "
    "no runtime to run tools with; start it with the app to approve, resume, steer or stop"
)


@dataclass(slots=True)
class BackgroundView:
    """A session's background work: running activities, notices not yet
    delivered (with their output tail), and those the model was shown."""

    running: list[BackgroundActivity] = field(default_factory=list)
    pending: list[BackgroundNotice] = field(default_factory=list)
    delivered: list[Item] = field(default_factory=list)
    problem: str = ""


def _no_runs(request: ModelRequest) -> str:
    raise UsageError("the console opened this session to record a decision, not to run it")


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "—"


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["seconds"] = _seconds
    env.filters["short"] = lambda s: str(s)[:8]
    env.filters["path"] = lambda s: quote(str(s), safe="")
    env.filters["tail"] = _tail
    return env


class Console:
    """The web console over a runtime's store: an ASGI application.

    Read-only unless `can_act` (then `runtime` is the host's, with its agents);
    `read_only_reason` is what the pages say instead of the controls. `token` is
    the access token (a fresh one when None). `poll_interval` is how often live
    pages look at the store. A request body past `max_body` bytes is refused
    (413) as it streams. `close()` (or the ASGI lifespan) cancels its resumes.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        can_act: bool = False,
        token: str | None = None,
        read_only_reason: str = READ_ONLY,
        poll_interval: float = 0.5,
        background: BackgroundService | None = None,
        max_body: int = MAX_FORM_BODY,
    ) -> None:
        self.runtime = runtime
        self.can_act = can_act
        if can_act:
            # Deciding a child's escalated calls here lets the child go on,
            # even when no agent of the app offers delegation.
            DecidedChildren.of(runtime)
        self.read_only_reason = read_only_reason
        self.token = token or new_token()
        self.poll_interval = poll_interval
        self._background = background
        self._env = _environment()
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._flash: dict[str, list[str]] = {}
        self._positions: dict[str, int] = {}
        self._closing = False
        self._guard = AccessGuard(self._starlette(), self.token)
        too_large = self._render("refused.html", 413, reason="request too large", live_url="")
        self._guard.app = BodyLimit(self._guard.app, max_body, too_large)

    @classmethod
    def reading(cls, store: SessionStore | str, **options: Any) -> Console:
        """A read-only console over `store` (an instance or a URL)."""
        return cls(Runtime(store=store), can_act=False, **options)

    @classmethod
    def acting(cls, runtime: Runtime, **options: Any) -> Console:
        """A console that decides, resumes, steers and stops through the host's runtime."""
        return cls(runtime, can_act=True, **options)

    @property
    def store(self) -> SessionStore:
        """The store the console reads."""
        return self.runtime.store

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._guard(scope, receive, send)

    async def wait_idle(self) -> None:
        """Wait until the runs this console started have ended."""
        while self._runs:
            await asyncio.wait(list(self._runs.values()))

    async def close(self) -> None:
        """Cancel the runs this console started (their runs end as a hard stop
        does) and end the event streams."""
        self._closing = True
        tasks = list(self._runs.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # ------------------------------------------------------------ the app

    def _starlette(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            yield
            await self.close()

        return Starlette(
            routes=[
                Route("/", self._sessions_page),
                Route("/live", self._sessions_live),
                Route("/sessions/{session_id:path}/live", self._session_live),
                Route("/sessions/{session_id:path}/decide", self._decide, methods=["POST"]),
                Route("/sessions/{session_id:path}/answer", self._answer, methods=["POST"]),
                Route("/sessions/{session_id:path}/resume", self._resume, methods=["POST"]),
                Route("/sessions/{session_id:path}/steer", self._steer, methods=["POST"]),
                Route("/sessions/{session_id:path}/stop", self._stop, methods=["POST"]),
                Route("/sessions/{session_id:path}/fork", self._fork, methods=["POST"]),
                Route("/sessions/{session_id:path}", self._session_page),
                Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
            ],
            lifespan=lifespan,
        )

    def _render(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        page = self._env.get_template(template).render(
            can_act=self.can_act,
            read_only_reason=self.read_only_reason,
            csrf=self._guard.csrf_token,
            statuses=STATUSES,
            **context,
        )
        return HTMLResponse(page, status_code=status)

    def _not_found(self, session_id: str) -> HTMLResponse:
        return self._render("missing.html", 404, session_id=session_id, live_url="")

    # ------------------------------------------------------------ sessions table

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

    # ------------------------------------------------------------ one session

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
            flash=self._flash.pop(session_id, []),
            running_here=session_id in self._runs,
            agent_known=meta.agent in self.runtime.agents,
            forked_from=_origin(meta.metadata.get(FORKED_FROM)),
            sid=quote(session_id, safe=""),
            live_url=f"/sessions/{quote(session_id, safe='')}/live?" + _query({"since": since}),
            now=now(),
        )

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

    # ------------------------------------------------------------ acting

    async def _form(self, request: Request) -> dict[str, str] | Response:
        """The posted form, once the request may change state; else the refusal."""
        if not self.can_act:
            return self._render("refused.html", 403, reason=self.read_only_reason, live_url="")
        origin = request.headers.get("origin")
        host = request.headers.get("host", "")
        if origin is not None and origin.split("://", 1)[-1] != host:
            return self._render("refused.html", 403, reason="cross-origin request", live_url="")
        body = await request.body()
        form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        if not self._guard.check_csrf(form.get("csrf")):
            return self._render(
                "refused.html", 403, reason="missing or wrong CSRF token", live_url=""
            )
        return form

    def _back(self, session_id: str, note: str | None = None) -> Response:
        if note:
            self._flash.setdefault(session_id, []).append(note)
        return RedirectResponse(f"/sessions/{quote(session_id, safe='')}#actions", 303)

    async def _open(self, session_id: str) -> Session:
        """The session to record something in: with the app's agent when it has
        it, else a stand-in that can never run (a decision needs the log only)."""
        meta = await self.store.get(session_id)
        agent = self.runtime.agents.get(meta.agent)
        if agent is None:
            agent = Agent(meta.agent or "console", FunctionModel(_no_runs, name="decisions-only"))
        session = Session(self.runtime, session_id, agent)
        await session.journal.sync()
        return session

    async def _acting(
        self,
        request: Request,
        act: Callable[[str, Mapping[str, str]], Awaitable[str | None]],
    ) -> Response:
        session_id = request.path_params["session_id"]
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        try:
            note = await act(session_id, form)
        except SessionNotFound:
            return self._not_found(session_id)
        except TaskloomError as exc:
            note = f"{type(exc).__name__}: {exc}"
        return self._back(session_id, note)

    async def _decide(self, request: Request) -> Response:
        return await self._acting(request, self._record_decision)

    async def _answer(self, request: Request) -> Response:
        async def act(session_id: str, form: Mapping[str, str]) -> str | None:
            session = await self._open(session_id)
            input_id = form.get("input_id", "")
            asked = {q.id: q for q in await session.pending_input()}.get(input_id)
            if asked is None:
                return f"no question {input_id!r} waits for an answer in this session"
            action = form.get("action", "accept")
            content = _answer_content(asked.schema, form) if action == "accept" else None
            await session.answer(input_id, content, action=action)
            return f"answered {input_id}" if action == "accept" else f"{action}d {input_id}"

        return await self._acting(request, act)

    async def _record_decision(self, session_id: str, form: Mapping[str, str]) -> str | None:
        # A child's escalated call is decided on the child's page: the
        # decision hook goes on with the child, and nothing is left to resume.
        session = await self._open(session_id)
        call_id = form.get("call_id", "")
        request = session.journal.log.request(call_id)
        if request is None or not any(c.id == call_id for c in session.journal.log.parked()):
            return f"no call {call_id!r} awaits a decision in this session"
        if form.get("hash") != request.hash:
            return f"the arguments of {call_id!r} are not the ones shown; look again"
        note = form.get("note", "").strip() or None
        if form.get("verdict") == "deny":
            await session.deny(call_id, note=note)
            done = f"denied {call_id}"
        else:
            await session.approve(call_id, note=note)
            done = f"approved {call_id}"
        if await session.pending():
            return done
        if any(isinstance(e.payload, SubagentDispatched) for e in await session.entries()):
            # A child that escalated its calls: the decision resumes it, or,
            # when its parent's turn is parked on it (an inline escalation),
            # the parent's resume runs it on, then the parent.
            handover = DecidedChildren.of(self.runtime).handover(session_id)
            if handover is not None and handover.where == "parent":
                return f"{done}; {self._start_resume(handover.parent_id) or 'it goes on'}"
            return f"{done}; it goes on"
        # Every call of the parked turn is decided: carry on, as the CLI's
        # `approve` followed by `resume` would.
        return f"{done}; {self._start_resume(session_id) or 'resuming'}"

    async def _resume(self, request: Request) -> Response:
        async def act(session_id: str, form: Mapping[str, str]) -> str | None:
            session = await self._open(session_id)
            if not session.journal.log.parked():
                return "nothing to resume: no turn of this session is parked for approval"
            if await session.pending():
                return "every parked call needs a decision before the run can resume"
            return self._start_resume(session_id) or "resuming"

        return await self._acting(request, act)

    def _start_resume(self, session_id: str) -> str | None:
        """Start resuming the session here; a reason when it cannot."""
        running = self._runs.get(session_id)
        if running is not None:
            return "this console is already running it"
        task = asyncio.get_running_loop().create_task(self._run_resume(session_id))
        self._runs[session_id] = task
        task.add_done_callback(lambda _: self._runs.pop(session_id, None))
        return None

    async def _run_resume(self, session_id: str) -> None:
        try:
            # Fenced: a run another decider (or this console) resumed meanwhile is left alone.
            await resume_decided(await self.runtime.open_session(session_id))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The run records its own failure in the log; this says it on the page.
            unexpected = not isinstance(exc, TaskloomError)
            logger.warning("resume of session %s failed: %s", session_id, exc, exc_info=unexpected)
            self._flash.setdefault(session_id, []).append(
                f"resume failed: {type(exc).__name__}: {exc}"
            )

    async def _steer(self, request: Request) -> Response:
        async def act(session_id: str, form: Mapping[str, str]) -> str | None:
            text = form.get("text", "").strip()
            if not text:
                return "nothing to steer with: the text was empty"
            session = await self._open(session_id)
            await session.steer(text)
            return "steering sent: it is folded in at the next round boundary"

        return await self._acting(request, act)

    async def _stop(self, request: Request) -> Response:
        async def act(session_id: str, form: Mapping[str, str]) -> str | None:
            session = await self._open(session_id)
            await session.request_stop("stopped from the console")
            return "stop requested: the run ends at its next round boundary"

        return await self._acting(request, act)

    async def _fork(self, request: Request) -> Response:
        """Fork the session at the posted entry position and show the fork."""
        session_id = request.path_params["session_id"]
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        at = form.get("at", "")
        if not (at.isascii() and at.isdigit()):
            return self._back(session_id, f"cannot fork at {at!r}: not an entry position")
        try:
            fork = await fork_session(self.store, session_id, int(at))
        except SessionNotFound:
            return self._not_found(session_id)
        except TaskloomError as exc:
            return self._back(session_id, f"{type(exc).__name__}: {exc}")
        self._flash.setdefault(fork.id, []).append(f"forked from {session_id} at entry #{at}")
        return RedirectResponse(f"/sessions/{quote(fork.id, safe='')}#actions", 303)


def _query(params: Mapping[str, str]) -> str:
    return "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in params.items() if v)


def _origin(value: object) -> tuple[str, int] | None:
    """(session id, position) of a fork's origin, when its metadata names one."""
    if not isinstance(value, Mapping):
        return None
    session_id, position = value.get("session_id"), value.get("position")
    if not isinstance(session_id, str) or not isinstance(position, int):
        return None
    return session_id, position


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


def _answer_content(schema: Mapping[str, Any] | None, form: Mapping[str, str]) -> dict[str, Any]:
    """The answer's content from the form's `f:<name>` fields, typed by the
    schema; an empty optional field is left out (the session checks the rest)."""
    content: dict[str, Any] = {}
    properties = (schema or {}).get("properties") or {}
    for name, prop in properties.items():
        kind = prop.get("type") if isinstance(prop, Mapping) else None
        raw = form.get(f"f:{name}")
        if kind == "boolean":
            content[name] = raw in ("on", "true", "yes")
            continue
        if raw is None or raw == "":
            continue
        try:
            content[name] = (
                int(raw) if kind == "integer" else float(raw) if kind == "number" else raw
            )
        except ValueError:
            content[name] = raw  # the session's check says what is wrong with it
    return content
