"""The console's Starlette application: pages, live updates, and acting.

Pages are drawn on the server from the store (see `_read`, `_tree`,
`_timeline`) by `_pages`, which also streams their live updates; acting
(`_acting`) needs the host's runtime (`--app`). What both share (the
console's state, the templates) is `_shared`; this module assembles them
into the ASGI application and its routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._serving import MAX_FORM_BODY, BodyLimit
from ..backends import SessionStore
from ..background import BackgroundService
from ..delegation import DecidedChildren
from ..runtime import Runtime
from ._acting import Acting
from ._auth import AccessGuard
from ._pages import SessionPages
from ._shared import HERE, environment

READ_ONLY = (
    "read-only: this console was started without --app module:factory, so it has "
    "no runtime to run tools with; start it with the app to approve, resume, steer or stop"
)


class Console(SessionPages, Acting):
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
        self.token = token or secrets.token_urlsafe(24)  # 192 bits
        self.poll_interval = poll_interval
        self._background = background
        self._env = environment()
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
