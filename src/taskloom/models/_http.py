"""HTTP plumbing shared by the wire adapters: clients, errors, server-sent events.

Every adapter sends through `send_json` / `open_stream`, so all raise the same
typed errors (`taskloom.errors`), never a bare `httpx2` exception. An error
keeps the provider's words but never the request's credentials: a server that
echoes the key it was sent has it replaced by `[redacted]` (`redact_error`).
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, NamedTuple

import httpx2

from .._redact import redact, redact_value, safe_url
from ..errors import (
    AuthenticationError,
    ContextWindowExceeded,
    InvalidRequest,
    ProviderError,
    ProviderOverloaded,
    RateLimitError,
    TransportError,
)

DEFAULT_TIMEOUT = httpx2.Timeout(600.0, connect=10.0)

# The shared client keeps every connection it may open: the next burst of
# concurrent runs reuses them (a new TLS connection costs milliseconds of CPU).
DEFAULT_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=100)

_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "context window",
    "maximum context length",
    "prompt is too long",
    "too many tokens",
    # Gemini: "The input token count (N) exceeds the maximum number of tokens allowed (M)."
    "exceeds the maximum number of tokens",
)

_GOOGLE_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_GOOGLE_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_GOOGLE_BAD_KEYS = frozenset({"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED"})

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx2.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


# The last loop asked about and its client, held weakly as `_clients` holds
# them: every request asks, and a weak-keyed look-up makes a weak reference
# each time.
_last: tuple[Callable[[], object], Callable[[], httpx2.AsyncClient | None]] = (
    lambda: None,
    lambda: None,
)


def default_client() -> httpx2.AsyncClient:
    """One pooled client per event loop (pooled connections belong to the loop
    that opened them), made at first use, for adapters not given their own."""
    global _last
    loop = asyncio.get_running_loop()
    last_loop, last_client = _last
    client = last_client()
    if last_loop() is loop and client is not None and not client.is_closed:
        return client
    client = _clients.get(loop)
    if client is None or client.is_closed:
        client = httpx2.AsyncClient(timeout=DEFAULT_TIMEOUT, limits=DEFAULT_LIMITS)
        _clients[loop] = client
    _last = (weakref.ref(loop), weakref.ref(client))
    return client


@dataclass(frozen=True, slots=True)
class Target:
    """Where a model's requests go: endpoint, headers, the provider errors name,
    a hint for authentication errors (why no key was sent) and the credentials
    no error may repeat."""

    url: str
    headers: Mapping[str, str]
    provider: str
    auth_hint: str | None = None
    secrets: tuple[str, ...] = ()


def redact_error(error: ProviderError, secrets: tuple[str, ...]) -> ProviderError:
    """`error`, changed in place: `secrets` redacted from its message, arguments and body."""
    if not secrets:
        return error
    error.message = redact(error.message, secrets)
    error.args = tuple(redact(a, secrets) if isinstance(a, str) else a for a in error.args)
    try:
        error.body = redact_value(error.body, secrets)
    except RecursionError:
        # A body nested too deeply to walk is dropped rather than kept unredacted.
        error.body = None
    return error


def _retry_after(headers: httpx2.Headers) -> float | None:
    raw = headers.get("retry-after-ms")
    if raw:
        try:
            return float(raw) / 1000.0
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(raw).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _google_details(err: dict[str, Any]) -> tuple[float | None, str | None]:
    """`RetryInfo.retryDelay` ("37s") and the `ErrorInfo` reason of a `google.rpc.Status`."""
    delay: float | None = None
    reason: str | None = None
    details = err.get("details")
    for detail in details if isinstance(details, list) else ():
        if not isinstance(detail, dict):
            continue
        kind = detail.get("@type")
        if kind == _GOOGLE_RETRY_INFO:
            raw = detail.get("retryDelay")
            if isinstance(raw, str) and raw.endswith("s"):
                try:
                    delay = max(0.0, float(raw[:-1]))
                except ValueError:
                    pass
        elif kind == _GOOGLE_ERROR_INFO and isinstance(detail.get("reason"), str):
            reason = detail["reason"]
    return delay, reason


def error_from_response(
    status: int, body: bytes, headers: httpx2.Headers, provider: str
) -> ProviderError:
    """Map an error response to the typed hierarchy, keeping the provider's message
    verbatim (Google's `status` is the type, its `RetryInfo` a `Retry-After`)."""
    payload: Any = None
    message = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    error_type: str | None = None
    retry_after = _retry_after(headers)
    reason: str | None = None
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):  # nesting too deep to read: keep the text
        payload = None
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, dict):
            message = str(err.get("message") or message)
            google_status = err.get("status")
            error_type = err.get("type") or (
                google_status if isinstance(google_status, str) else None
            )
            error_type = error_type or err.get("code")
            if error_type is not None:
                error_type = str(error_type)
            delay, reason = _google_details(err)
            if retry_after is None:
                retry_after = delay
        elif isinstance(err, str):
            message = err
    kw: dict[str, Any] = {
        "status": status,
        "error_type": error_type,
        "provider": provider,
        "retry_after": retry_after,
        "body": payload,
    }
    lowered = f"{error_type or ''} {message}".lower()
    if status in (401, 403) or reason in _GOOGLE_BAD_KEYS:
        return AuthenticationError(message, **kw)
    if status == 429:
        return RateLimitError(message, **kw)
    if status == 529 or "overloaded" in lowered:
        return ProviderOverloaded(message, retryable=True, **kw)
    if any(m in lowered for m in _CONTEXT_MARKERS):
        return ContextWindowExceeded(message, retryable=False, **kw)
    if status in (400, 404, 413, 422):
        return InvalidRequest(message, **kw)
    return ProviderError(message, **kw)


def error_in_body(payload: Mapping[str, Any], provider: str) -> ProviderError:
    """The typed error for an error object sent with a 200 status (mid-stream, mostly)."""
    err = payload.get("error")
    code = err.get("code") if isinstance(err, Mapping) else None
    status: int | None = None
    if isinstance(code, int) and 400 <= code <= 599:
        status = code
    elif isinstance(code, str) and code.isdigit() and 400 <= int(code) <= 599:
        status = int(code)
    # Without a status of its own the failure is the server's: map it as a
    # 500 (retryable), then drop the status the HTTP layer never sent.
    error = error_from_response(
        status or 500, json.dumps(payload).encode(), httpx2.Headers(), provider
    )
    if status is None:
        error.status = None
    return error


def transport_error(exc: Exception, provider: str, url: str | None = None) -> TransportError:
    # A URL no client can reach (ftp://, no scheme) fails the same way on
    # every attempt: retrying it would only hide the mistake.
    retryable = not isinstance(exc, httpx2.UnsupportedProtocol)
    # The URL (without credentials) says which server a failed connection was for.
    where = f"cannot reach {safe_url(url)}: " if url is not None else ""
    return TransportError(
        f"{where}{type(exc).__name__}: {exc}", provider=provider, retryable=retryable
    )


def _failure(target: Target, response: httpx2.Response, content: bytes) -> ProviderError:
    error = error_from_response(response.status_code, content, response.headers, target.provider)
    if target.auth_hint is not None and isinstance(error, AuthenticationError):
        error.message = f"{error.message} ({target.auth_hint})"
        error.args = (error.message,)
    return redact_error(error, target.secrets)


_BODY_HEADERS = ("content-length", "content-type", "transfer-encoding")


def names_body_headers(headers: Iterable[str]) -> bool:
    """Whether header names `headers` set a body's length, type or transfer
    encoding (any case): httpx2 keeps those for a `json=` body."""
    return any(name.lower() in _BODY_HEADERS for name in headers)


def json_headers(headers: Mapping[str, str], length: int) -> dict[str, str]:
    """`headers` with the two httpx2 adds for a JSON body (`json=`), in its
    order: the same request goes out for a body encoded beforehand."""
    return {**headers, "Content-Length": str(length), "Content-Type": "application/json"}


async def send_json(
    client: httpx2.AsyncClient,
    target: Target,
    body: Mapping[str, Any],
    encoded: bytes | None = None,
) -> Any:
    """POST a JSON body and return the decoded JSON answer, or raise a typed error.
    `encoded`: the body already encoded as httpx2 would encode it (then sent as
    it is; neither `target.headers` nor the client's own name its length or
    type: see `names_body_headers`)."""
    try:
        if encoded is None:
            response = await client.post(target.url, json=body, headers=target.headers)
        else:
            headers = json_headers(target.headers, len(encoded))
            response = await client.post(target.url, content=encoded, headers=headers)
    except httpx2.HTTPError as exc:
        raise transport_error(exc, target.provider, target.url) from exc
    if response.status_code >= 400:
        raise _failure(target, response, response.content)
    try:
        return response.json()
    except (ValueError, RecursionError) as exc:
        raise ProviderError(
            f"malformed JSON in response: {response.text[:200]!r}",
            status=response.status_code,
            provider=target.provider,
            retryable=True,
        ) from exc


@asynccontextmanager
async def open_stream(
    client: httpx2.AsyncClient,
    target: Target,
    body: Mapping[str, Any],
    encoded: bytes | None = None,
) -> AsyncIterator[httpx2.Response]:
    """Open a streaming POST; error statuses raise before the body is iterated.
    `encoded`: as `send_json`'s."""
    if encoded is None:
        request = client.build_request("POST", target.url, json=body, headers=target.headers)
    else:
        headers = json_headers(target.headers, len(encoded))
        request = client.build_request("POST", target.url, content=encoded, headers=headers)
    try:
        response = await client.send(request, stream=True)
    except httpx2.HTTPError as exc:
        raise transport_error(exc, target.provider, target.url) from exc
    try:
        if response.status_code >= 400:
            try:
                content = await response.aread()
            except httpx2.HTTPError as exc:
                raise transport_error(exc, target.provider) from exc
            raise _failure(target, response, content)
        yield response
    finally:
        await response.aclose()


class SSE(NamedTuple):
    """One server-sent event (a named tuple: a stream makes one per chunk)."""

    event: str
    data: str


class SSEDecoder:
    """Server-sent events from a body's lines, fed by the reading loop itself
    (no generator step per event): `line()` returns the event a blank line
    completes, `end()` one the body ended without."""

    __slots__ = ("_data", "_event")

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def line(self, line: str) -> SSE | None:
        """Take one line (without its line end); the event it completes, if any."""
        if line.endswith("\r"):
            line = line[:-1]
        if not line:
            return self.end()
        if line[0] == ":":
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def end(self, *, at_eof: bool = False) -> SSE | None:
        """The event gathered so far (None when there is none), starting afresh;
        `at_eof`: the body ended, and an event with no data line is dropped."""
        data, event = self._data, self._event
        if not data and (at_eof or not event):
            self._event = ""
            return None
        self._data, self._event = [], ""
        return SSE(event or "message", "\n".join(data))


def loads_event(sse: SSE, provider: str) -> Any:
    """Parse an event's JSON data; malformed JSON is a retryable provider error."""
    try:
        return json.loads(sse.data)
    except (ValueError, RecursionError) as exc:
        raise ProviderError(
            f"malformed JSON in stream event: {sse.data[:200]!r}", provider=provider, retryable=True
        ) from exc
