"""The web console: watch sessions, their delegation tree and timeline, and
decide approvals in a browser (`taskloom serve`, the `web` extra).

`Console.reading(store)` is read-only; `Console.acting(runtime)` decides,
resumes, steers and stops through the host's runtime. A `Console` is an ASGI
application guarded by its access token (`console.token`): the token is given
once as `?token=...`, then kept in an HttpOnly, SameSite=Strict cookie; every
state change is a POST carrying a CSRF token; every text from a log is
HTML-escaped. Pages are drawn on the server; live pages follow the store over
server-sent events.
"""

from __future__ import annotations

from .._extras import needs_extra

with needs_extra("taskloom.console"):
    from ._app import Console

__all__ = ["Console"]
