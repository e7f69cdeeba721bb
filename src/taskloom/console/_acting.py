"""The console's actions: decisions, answers, steering and stop requests are
appended to the log like the CLI does; a resume runs in this process, in a
task the console owns and cancels when it closes; a fork shows the fork.
Every action is a POST that passes the form guard (acting console,
same origin, CSRF token)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..agent import Agent
from ..delegation import DecidedChildren
from ..entries import SubagentDispatched
from ..errors import SessionNotFound, TaskloomError, UsageError
from ..models import FunctionModel, ModelRequest
from ..runtime import Session, fork_session, resume_decided
from ._shared import ConsoleShared

logger = logging.getLogger("taskloom.console")


def _no_runs(request: ModelRequest) -> str:
    raise UsageError("the console opened this session to record a decision, not to run it")


class Acting(ConsoleShared):
    """The console's actions, each a POST route."""

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
        act: Callable[[str, Mapping[str, str]], Awaitable[str | Response | None]],
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
        return note if isinstance(note, Response) else self._back(session_id, note)

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
        deny = form.get("verdict") == "deny"
        await (session.deny if deny else session.approve)(call_id, note=note)
        done = f"{'denied' if deny else 'approved'} {call_id}"
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

        async def act(session_id: str, form: Mapping[str, str]) -> str | Response:
            at = form.get("at", "")
            if not (at.isascii() and at.isdigit()):
                return f"cannot fork at {at!r}: not an entry position"
            fork = await fork_session(self.store, session_id, int(at))
            self._flash.setdefault(fork.id, []).append(f"forked from {session_id} at entry #{at}")
            return RedirectResponse(f"/sessions/{quote(fork.id, safe='')}#actions", 303)

        return await self._acting(request, act)


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
