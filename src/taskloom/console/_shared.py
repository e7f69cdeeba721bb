"""What the console's pages and actions share: the state the console keeps
(its runs, flash notes, positions read) and how a page is drawn from the
templates."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from starlette.responses import HTMLResponse

from ..background import BackgroundService
from ..runtime import Runtime
from ._auth import AccessGuard
from ._read import STATUSES

if TYPE_CHECKING:
    from ..backends import SessionStore

HERE = Path(__file__).parent
TAIL_LINES = 20


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


def environment() -> jinja2.Environment:
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


class ConsoleShared:
    """The part of a `Console` its pages and actions use: its runtime, what
    it keeps between requests, and `_render`."""

    runtime: Runtime
    can_act: bool
    read_only_reason: str
    poll_interval: float
    _background: BackgroundService | None
    _env: jinja2.Environment
    _guard: AccessGuard
    _runs: dict[str, asyncio.Task[None]]
    _flash: dict[str, list[str]]
    _positions: dict[str, int]
    _closing: bool

    if TYPE_CHECKING:

        @property
        def store(self) -> SessionStore: ...

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
