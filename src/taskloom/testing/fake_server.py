"""A fake OpenAI-, Anthropic- and Gemini-compatible HTTP server on loopback, for tests.

`FakeServer` speaks HTTP/1.1 on real sockets (keep-alive, chunked server-sent
events) and answers, as JSON or streamed in the providers' own formats,
`POST /v1/chat/completions` (OpenAI Chat Completions), `/v1/responses`
(OpenAI Responses), `/v1/messages` (Anthropic Messages) and
`/v1beta/models/{model}:generateContent` / `:streamGenerateContent?alt=sse`
(Gemini, under a Vertex AI prefix too).

Each request takes the next item of a script: a reply (`FakeServer.reply`),
a fault (`error`, `rate_limit`, `overloaded`, `drop`, `malformed`,
`stream_error`, `hang`), or a reply after events not part of it (`prelude`).
An empty script answers the `default` item (a short text reply;
`default=None`: a 500). Every request is recorded in `server.requests`.

    async with FakeServer() as server:
        server.script(FakeServer.rate_limit(retry_after=2), FakeServer.reply("hi"))
        model = OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key="test")

`FakeServer.in_thread()` runs one on its own loop in a daemon thread (for
tests that drive a subprocess); `python -m taskloom.testing.fake_server` in
its own process, printing its root URL.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from http import HTTPStatus
from typing import Any

from ..messages import Usage
from ._fake_gemini import GeminiWire, gemini_route
from ._fake_wire import (
    _PING,
    _ROUTES,
    DEFAULT_REPLY,
    Drop,
    ErrorReply,
    FakeReply,
    FakeToolCall,
    Hang,
    Malformed,
    Prelude,
    RecordedRequest,
    ScriptItem,
    StopReason,
    StreamError,
    ToolCallSpec,
    _Call,
    _dumps,
    _split_text,
    _Wire,
)

__all__ = ["FakeServer", "main"]


def _truncate(frame: bytes) -> bytes:
    """The same event with its JSON data cut in half: a line no JSON parser accepts."""
    head, _, data = frame.rstrip(b"\n").rpartition(b"data: ")
    return head + b"data: " + data[: max(1, len(data) // 2)] + b"\n\n"


class _BadRequest(Exception):
    pass


async def _read_request(
    reader: asyncio.StreamReader,
) -> tuple[str, str, dict[str, str], bytes] | None:
    line = b"\r\n"
    while line in (b"\r\n", b"\n"):
        line = await reader.readline()
    if not line:
        return None
    try:
        method, target, _version = line.decode("latin-1").split()
    except ValueError:
        raise _BadRequest(line) from None
    headers: dict[str, str] = {}
    while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while size := int((await reader.readline()).split(b";")[0].strip() or b"0", 16):
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass  # trailers
        return method, target, headers, bytes(body)
    length = int(headers.get("content-length") or 0)
    return method, target, headers, await reader.readexactly(length)


def _head(status: int, headers: Mapping[str, str]) -> bytes:
    reason = "Overloaded" if status == 529 else HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


_GEMINI = GeminiWire()


class FakeServer:
    """An OpenAI/Anthropic/Gemini-compatible HTTP server on 127.0.0.1 that plays a script.

    `port=0` picks a free port. `default` answers requests the script does not
    cover (None: HTTP 500, `script_exhausted`). With `api_key`, requests
    without that key (in the provider's own header) get 401; unknown paths
    get 404 and bodies that are not a JSON object 400, none of them consuming
    the script. `connections` counts accepted TCP connections.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        default: ScriptItem | None = DEFAULT_REPLY,
        api_key: str | None = None,
    ) -> None:
        self.requests: list[RecordedRequest] = []
        self.connections = 0
        self.default = default
        self._port = port
        self._api_key = api_key
        # A lock, not only the loop, guards the script: in thread mode tests
        # script from their own thread while the server's loop consumes it.
        self._lock = threading.Lock()
        self._script: deque[ScriptItem] = deque()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._answered = 0

    @staticmethod
    def reply(
        text: str | Sequence[str] | None = None,
        *,
        tool_calls: Sequence[ToolCallSpec] = (),
        usage: Usage | None = None,
        stop_reason: StopReason | None = None,
        delay: float = 0.0,
        chunk_delay: float = 0.0,
    ) -> FakeReply:
        """A successful answer. A `text` string streams word by word (`"a b"` -> `"a"`,
        `" b"`); a sequence of strings streams as exactly those deltas. `tool_calls`
        are `(name, arguments)` or `(name, arguments, id)`; a str `arguments` is
        sent verbatim, a mapping as JSON. See `FakeReply` for the rest.
        """
        calls = tuple(
            FakeToolCall(
                spec[0],
                spec[1] if isinstance(spec[1], str) else _dumps(dict(spec[1])).decode(),
                spec[2] if len(spec) > 2 else None,
            )
            for spec in tool_calls
        )
        return FakeReply(_split_text(text), calls, usage, stop_reason, delay, chunk_delay)

    @staticmethod
    def error(
        status: int,
        *,
        error_type: str | None = None,
        message: str | None = None,
        body: Mapping[str, Any] | str | bytes | None = None,
        headers: Mapping[str, str] | None = None,
        retry_after: float | None = None,
    ) -> ErrorReply:
        """An HTTP error in the endpoint's error shape (or `body` verbatim)."""
        extra = dict(headers or {})
        if retry_after is not None:
            extra["retry-after"] = f"{retry_after:g}"
        return ErrorReply(status, error_type, message, body, extra)

    @staticmethod
    def rate_limit(retry_after: float | None = 1.0) -> ErrorReply:
        """429 with a `Retry-After` header (seconds); on the Gemini wire, a
        `RetryInfo` delay in the body instead, as Google sends it."""
        return FakeServer.error(429, retry_after=retry_after)

    @staticmethod
    def overloaded() -> ErrorReply:
        """529 `overloaded_error`, as Anthropic answers when it is overloaded."""
        return ErrorReply(
            529,
            body={
                "type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"},
                "request_id": "req_fake",
            },
        )

    # Faults that are their script items as they are (see each for what it does).
    drop = staticmethod(Drop)
    malformed = staticmethod(Malformed)
    stream_error = staticmethod(StreamError)
    hang = staticmethod(Hang)

    @staticmethod
    def truncate(after_events: int, reply: FakeReply | None = None) -> Drop:
        """End a stream cleanly after `after_events` events, before its final one."""
        return Drop(after_events, reply, ends_cleanly=True)

    @staticmethod
    def prelude(*events: Mapping[str, Any], reply: FakeReply | None = None) -> Prelude:
        """`events` streamed as they are before `reply` (see `Prelude`)."""
        return Prelude(events, reply)

    def script(self, *items: ScriptItem) -> None:
        """Append answers to the script; each request takes the next one."""
        with self._lock:
            self._script.extend(items)

    @property
    def pending(self) -> int:
        """How many scripted items no request has taken yet."""
        with self._lock:
            return len(self._script)

    def _next_item(self) -> ScriptItem | None:
        with self._lock:
            return self._script.popleft() if self._script else self.default

    @property
    def port(self) -> int:
        """The port the server listens on (raises before it started)."""
        if self._server is None:
            raise RuntimeError("FakeServer is not running")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`, the server's root."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, `http://127.0.0.1:PORT/v1`."""
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The Anthropic base URL, `http://127.0.0.1:PORT` (clients add `/v1/messages`)."""
        return self.url

    @property
    def gemini_base_url(self) -> str:
        """The Gemini API base URL, `http://127.0.0.1:PORT/v1beta` (clients add
        `/models/{model}:generateContent`)."""
        return self.url + "/v1beta"

    @property
    def vertex_base_url(self) -> str:
        """A Vertex AI base URL for Gemini (project `fake`, location `global`)."""
        return self.url + "/v1beta1/projects/fake/locations/global/publishers/google"

    async def start(self) -> None:
        """Listen on loopback in the running loop."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self._port)

    async def stop(self) -> None:
        """Stop listening and close every open connection (hung answers included)."""
        if self._server is None:
            return
        self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def __aenter__(self) -> FakeServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @classmethod
    @contextmanager
    def in_thread(cls, **options: Any) -> Iterator[FakeServer]:
        """Run a server (`options` to the constructor) on its own event loop in a
        daemon thread, stopped on exit; `script` and `requests` work from any thread."""
        server = cls(**options)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="FakeServer", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=30)
            yield server
        finally:
            with suppress(Exception):
                asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=30)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            if not thread.is_alive():
                loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            while (request := await _read_request(reader)) is not None:
                if not await self._answer(*request, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, _BadRequest, ValueError):
            pass
        except asyncio.CancelledError:
            # `stop` cancels open connections; ending normally keeps asyncio
            # from logging that as an error of the connection callback.
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _answer(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        raw: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        # False when the connection must close.
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = target.partition("?")[0]
        self.requests.append(RecordedRequest(method, target, headers, body, raw))
        keep_alive = headers.get("connection", "").lower() != "close"
        wire = _ROUTES.get(path)
        gemini = None if wire is not None else gemini_route(path)
        if gemini is not None:
            wire = _GEMINI
        if wire is None or method != "POST":
            await self._send_error(writer, _ROUTES["/v1/chat/completions"], ErrorReply(404), None)
            return keep_alive
        if not isinstance(body, dict):
            await self._send_error(
                writer, wire, ErrorReply(400, message="Body is not a JSON object."), None
            )
            return keep_alive
        if self._api_key is not None and not self._is_authorized(wire, headers):
            await self._send_error(writer, wire, ErrorReply(401), None)
            return keep_alive
        self._answered += 1
        item = self._next_item()
        if item is None:
            message = "FakeServer script exhausted: no scripted answer left for this request"
            item = ErrorReply(500, error_type="script_exhausted", message=message)
        # Gemini names the model and the streaming in the path, not the body.
        model, stream = gemini or (
            str(body.get("model") or "fake-model"),
            body.get("stream") is True,
        )
        call = _Call(body, self._answered, model, stream)
        return await self._play(item, wire, call, reader, writer) and keep_alive

    async def _play(
        self,
        item: ScriptItem,
        wire: _Wire,
        call: _Call,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        # False when the item leaves the connection unusable.
        if isinstance(item, ErrorReply):
            await self._send_error(writer, wire, item, call)
            return True
        if isinstance(item, Hang):
            await reader.read()
            return False
        if isinstance(item, StreamError) and not call.is_stream:
            error = ErrorReply(item.status, error_type=item.error_type, message=item.message)
            await self._send_error(writer, wire, error, call)
            return True
        reply = item if isinstance(item, FakeReply) else item.reply or DEFAULT_REPLY
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if not call.is_stream:
            payload = _dumps(wire.body(reply, call))
            if isinstance(item, Drop | Malformed):
                if isinstance(item, Drop) and item.after_events == 0:
                    return False
                cut = payload[: len(payload) // 2]
                sent = cut if isinstance(item, Malformed) else payload
                await self._send(writer, wire, call, 200, cut, length=len(sent))
                return isinstance(item, Malformed)
            await self._send(writer, wire, call, 200, payload)
            return True
        frames = wire.events(reply, call)
        if isinstance(item, Prelude):
            frames = [b"data: " + _dumps(dict(event)) + b"\n\n" for event in item.events] + frames
        if isinstance(item, Drop | Malformed | StreamError):
            n = max(0, min(item.after_events, len(frames) - 1))
            kept = frames[:n]
            if isinstance(item, Malformed):
                # A ping carries nothing a client must parse; break the next real event.
                while n < len(frames) - 1 and frames[n] == _PING:
                    kept.append(frames[n])
                    n += 1
                kept.append(_truncate(frames[n]))
            elif isinstance(item, StreamError):
                kept.append(wire.stream_error(call, item, n))
            frames = kept
        is_complete = not isinstance(item, Drop) or item.ends_cleanly
        headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "transfer-encoding": "chunked",
            "cache-control": "no-cache",
            **self._request_id(wire, call),
        }
        writer.write(_head(200, headers))
        # One HTTP chunk per event, drained each time, so a client sees events
        # arrive one by one (and a drop lands between two events).
        for frame in frames:
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
            writer.write(_chunk(frame))
            await writer.drain()
        if is_complete:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        return is_complete

    def _is_authorized(self, wire: _Wire, headers: Mapping[str, str]) -> bool:
        if wire.provider == "anthropic":
            return headers.get("x-api-key") == self._api_key
        bearer = headers.get("authorization") == f"Bearer {self._api_key}"
        if wire.provider == "google":
            return bearer or headers.get("x-goog-api-key") == self._api_key
        return bearer

    @staticmethod
    def _request_id(wire: _Wire, call: _Call | None) -> dict[str, str]:
        key = "request-id" if wire.provider == "anthropic" else "x-request-id"
        return {key: f"req_fake{call.number if call else 0}"}

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        wire: _Wire,
        call: _Call | None,
        status: int,
        body: bytes,
        *,
        length: int | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        """A JSON answer (`length` in the headers when a cut body claims more)."""
        headers = {
            "content-type": "application/json",
            "content-length": str(len(body) if length is None else length),
            **self._request_id(wire, call),
            **(extra or {}),
        }
        writer.write(_head(status, headers) + body)
        await writer.drain()

    async def _send_error(
        self, writer: asyncio.StreamWriter, wire: _Wire, error: ErrorReply, call: _Call | None
    ) -> None:
        extra = dict(error.headers)
        if error.body is None:
            retry = extra.pop("retry-after", None) if wire.retry_in_body else None
            payload = _dumps(wire.error_body(error, retry))
        elif isinstance(error.body, Mapping):
            payload = _dumps(dict(error.body))
        else:
            payload = error.body.encode() if isinstance(error.body, str) else error.body
        await self._send(writer, wire, call, error.status, payload, extra=extra)


async def _serve_forever(port: int, text: str | None) -> None:
    default = DEFAULT_REPLY if text is None else FakeServer.reply(text)
    async with FakeServer(port=port, default=default) as server:
        print(server.url, flush=True)
        await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m taskloom.testing.fake_server [--port N] [--text T]`: serve the default
    reply to every request until killed; the first line printed is the root URL."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--text", default=None, help="the text every request gets")
    args = parser.parse_args(argv)
    with suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(args.port, args.text))


if __name__ == "__main__":
    main()
