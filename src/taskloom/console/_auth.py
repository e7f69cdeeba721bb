"""Access to the console: one token, then a cookie; CSRF tokens for changes.

The token is given once, as `?token=...` on any URL. The answer sets an
HttpOnly, SameSite=Strict cookie and redirects (303) to the same URL without
the token, so the address bar, a bookmark or a screenshot shows the page
and never the token. Only a link followed from another site (the browser's
`Sec-Fetch-Site: cross-site`) gets a page of our own that goes on instead: a
redirect would continue that cross-site chain, along which a strict cookie
is not sent. From then on the cookie is the credential; without it, or the
token, every request answers 401.

The cookie and the CSRF token are HMACs of the access token, so neither
reveals it and neither outlives a restart with another token. Every answer
carries a strict Content-Security-Policy (scripts only from our own static
files) and sends no referrer, so the token never leaks through a link (the page that takes it sends no
referrer at all; the others only to themselves, which keeps the `Origin` of
their forms).
"""

from __future__ import annotations

import hashlib
import hmac
from html import escape
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode

from .._serving import ASGIApp, Message, Receive, Scope, Send

COOKIE = "taskloom_console"

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"referrer-policy", b"same-origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


class AccessGuard:
    """ASGI middleware: lets a request through only with the access token
    (then sets the cookie) or the cookie; adds the security headers."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise ValueError("the console needs a non-empty access token")
        self.app = app
        self._token = token
        self.cookie_value = self._derive("cookie")
        self.csrf_token = self._derive("csrf")

    def _derive(self, purpose: str) -> str:
        return hmac.new(self._token.encode(), purpose.encode(), hashlib.sha256).hexdigest()

    def check_csrf(self, given: str | None) -> bool:
        """Whether a form's CSRF token is this console's."""
        return given is not None and hmac.compare_digest(given.encode(), self.csrf_token.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = next((v for k, v in query if k == "token"), None)
        if given is not None:
            if hmac.compare_digest(given.encode(), self._token.encode()):
                rest = [(k, v) for k, v in query if k != "token"]
                await self._hand_over(scope, send, rest)
            else:
                await _answer(send, 401, _page("Wrong access token", _UNAUTHORIZED))
            return
        if not self._has_cookie(scope):
            await _answer(send, 401, _page("Access token needed", _UNAUTHORIZED))
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0] not in _OURS]
                message["headers"] = headers + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, secured)

    def _has_cookie(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"cookie":
                jar: SimpleCookie = SimpleCookie()
                try:
                    jar.load(value.decode("latin-1"))
                except Exception:
                    continue  # a malformed cookie header is no credential
                morsel = jar.get(COOKIE)
                if morsel is not None and hmac.compare_digest(
                    morsel.value.encode(), self.cookie_value.encode()
                ):
                    return True
        return False

    async def _hand_over(self, scope: Scope, send: Send, rest: list[tuple[str, str]]) -> None:
        target = quote(scope.get("path", "/") or "/", safe="/")
        if not target.startswith("/") or target.startswith("//"):
            target = "/"
        if rest:
            target += "?" + urlencode(rest)
        cookie = f"{COOKIE}={self.cookie_value}; HttpOnly; SameSite=Strict; Path=/"
        if scope.get("scheme") == "https":
            cookie += "; Secure"
        set_cookie = (b"set-cookie", cookie.encode("latin-1"))
        if (b"sec-fetch-site", b"cross-site") not in scope.get("headers", []):
            body = _page("Signed in", f'<p><a href="{escape(target)}">Continue</a></p>')
            await _answer(send, 303, body, [set_cookie, (b"location", target.encode())])
            return
        link = f'<p><a href="{escape(target)}">Continue to the console</a></p>'
        await _answer(send, 200, _page("Signed in", link, refresh=target), [set_cookie])


_OURS = {name for name, _ in SECURITY_HEADERS}

_UNAUTHORIZED = (
    "<p>This console needs its access token. Open the address "
    "<code>taskloom serve</code> printed (it ends in <code>?token=...</code>), "
    "or add <code>?token=</code> with the token given by <code>--token</code> "
    "or <code>TASKLOOM_CONSOLE_TOKEN</code>.</p>"
)


def _page(title: str, body: str, refresh: str | None = None) -> bytes:
    meta = ""
    if refresh is not None:
        meta = f'<meta http-equiv="refresh" content="0; url={escape(refresh)}">'
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{meta}'
        f"<title>{escape(title)} · taskloom console</title></head>"
        f"<body><h1>{escape(title)}</h1>{body}</body></html>"
    ).encode()


async def _answer(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *[h for h in SECURITY_HEADERS if h[0] != b"referrer-policy"],
        (b"referrer-policy", b"no-referrer"),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
