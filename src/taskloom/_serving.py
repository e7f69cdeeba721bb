"""What every HTTP endpoint taskloom serves shares (`taskloom a2a serve`,
`taskloom mcp serve --http`, the console): a bound on request bodies (checked
as the body streams), the bearer token, and a socket that does not reach
other machines unguarded. No web framework is imported here.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from typing import TYPE_CHECKING, Any, Literal

from .errors import ConfigurationError

if TYPE_CHECKING:
    from starlette.applications import Starlette

MAX_JSONRPC_BODY = 1 << 20
"""The default bound on a JSON-RPC request body (A2A and MCP): 1 MiB, past
the context window of most models, so no task a model could take is refused."""

MAX_FORM_BODY = 64 * 1024
"""The console's default bound on a request body: 64 KiB."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def jsonrpc_error(
    status: int, message: str, headers: Collection[tuple[bytes, bytes]] = ()
) -> ASGIApp:
    """An ASGI app answering every request with a JSON-RPC "invalid request"
    error (id null: refused before its id is read) at HTTP `status`."""
    error = {"code": -32600, "message": message}
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    length = str(len(body)).encode()
    start = [(b"content-type", b"application/json"), (b"content-length", length), *headers]

    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": status, "headers": start})
        await send({"type": "http.response.body", "body": body})

    return answer


class BodyLimit:
    """ASGI middleware: a request whose body passes `limit` bytes never
    reaches `app` whole; `refusal` (an ASGI app) answers it."""

    def __init__(self, app: ASGIApp, limit: int, refusal: ASGIApp) -> None:
        self.app = app
        self.limit = _checked_limit(limit)
        self.refusal = refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.strip().isdigit() and int(value) > self.limit:
                await self.refusal(scope, receive, send)
                return
        seen = 0
        refused = started = False

        async def counted() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    refused = True
                    # Raised into the app as the 413 its framework knows.
                    from starlette.exceptions import HTTPException

                    raise HTTPException(413, f"the request body passes {self.limit} bytes")
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the app's own answer to a cut-off body: the refusal goes instead
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except Exception:
            # However the app wrapped the cut, it was the cut.
            if not refused:
                raise
        if refused and not started:
            await self.refusal(scope, receive, send)


_UNAUTHORIZED = jsonrpc_error(
    401,
    "unauthorized: this server needs the header Authorization: Bearer <token>",
    [(b"www-authenticate", b"Bearer")],
)


class BearerGuard:
    """ASGI middleware: every HTTP request but those to `open_paths` needs
    `Authorization: Bearer <token>`, else 401 before anything is read."""

    def __init__(self, app: ASGIApp, token: str, open_paths: Collection[str] = ()) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and not any(path.endswith(p) for p in self.open_paths):
            given = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
            # Constant time, so the token cannot be guessed byte by byte.
            if not hmac.compare_digest(given, self.expected):
                await _UNAUTHORIZED(scope, receive, send)
                return
        await self.app(scope, receive, send)


def guard(
    app: Starlette,
    *,
    token: str | None,
    max_body: int,
    too_large: ASGIApp,
    open_paths: Collection[str] = (),
) -> None:
    """Bound `app`'s request bodies at `max_body` bytes (answered by
    `too_large`) and, with `token`, guard it with a `BearerGuard` outside the
    bound. Both are checked now, not at the first request."""
    _checked_limit(max_body)
    if token is not None and not token:
        raise ConfigurationError("the bearer token is empty")
    app.add_middleware(BodyLimit, limit=max_body, refusal=too_large)
    if token is not None:
        app.add_middleware(BearerGuard, token=token, open_paths=open_paths)


def _checked_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigurationError(
            f"a request body limit is a positive number of bytes, not {limit!r}"
        )
    return limit


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_token_beyond_loopback(host: str, token: str | None) -> None:
    """Refuse (`ConfigurationError`) to serve on an address other machines
    reach without a bearer token."""
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            f"serving on {host} reaches other machines: it needs a bearer token "
            "(or listen on 127.0.0.1)"
        )


def listen(host: str, port: int, token: str | None) -> tuple[socket.socket, str]:
    """A socket listening on `host:port` (port 0: one the OS picks), and its
    `http://` base URL (no trailing slash). Beyond loopback only with a token."""
    require_token_beyond_loopback(host, token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    # Listening now: a client told the address early is queued, not refused.
    sock.listen(128)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    return sock, f"http://{shown}:{sock.getsockname()[1]}"


async def serve_on(
    app: ASGIApp,
    sock: socket.socket,
    url: str,
    on_ready: Callable[[str], None] | None,
    *,
    lifespan: Literal["on", "off"],
) -> None:
    """Serve `app` with uvicorn on `sock` until cancelled; `on_ready` gets
    `url` once it accepts calls."""
    import uvicorn

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_ready is not None:
                on_ready(url)

    config = uvicorn.Config(app, log_level="warning", lifespan=lifespan)
    await Announcing(config).serve([sock])
