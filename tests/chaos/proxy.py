"""A fault-injecting TCP proxy on loopback, for putting a real server behind a bad network.

`FaultProxy` forwards every connection made to `127.0.0.1:<port>` to a
target (PostgreSQL on 127.0.0.1:5432 by default), and on command:

- `stall()`: stop forwarding in both directions but keep every socket open,
  like a network that silently drops traffic (nothing is lost: bytes read
  meanwhile are held and delivered after `resume()`); connections opened
  while stalled are accepted but not forwarded either;
- `reset()`: close every connection abruptly (shut down at once, then RST
  rather than a graceful close), like a server restart or a NAT box
  forgetting its table: the client's socket shows it before `reset()`
  returns, as a reset from the network would, with no turn of the loop;
- `resume()`: forward again.

It runs on the test's own event loop::

    async with FaultProxy() as proxy:
        store = PostgresBackend(proxy.dsn(PG_DSN), schema=pg_schema).store
        proxy.stall()
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

__all__ = ["FaultProxy"]

_CHUNK = 64 * 1024


class FaultProxy:
    """A TCP proxy from an ephemeral loopback port to `target_host:target_port`."""

    def __init__(self, target_host: str = "127.0.0.1", target_port: int = 5432) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.host = "127.0.0.1"
        self.port = 0
        self.connections_accepted = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def dsn(self, url: str) -> str:
        """`url` with its host and port replaced by this proxy's."""
        parts = urlsplit(url)
        userinfo, _, _ = parts.netloc.rpartition("@")
        netloc = f"{userinfo}@" if userinfo else ""
        return urlunsplit(parts._replace(netloc=f"{netloc}{self.host}:{self.port}"))

    async def start(self) -> FaultProxy:
        """Listen on an ephemeral loopback port (then `port` is set)."""
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def open_connections(self) -> int:
        """How many client connections are open through the proxy right now."""
        return len(self._tasks)

    def stall(self) -> None:
        """Stop forwarding; sockets stay open and bytes in flight wait for `resume()`."""
        self._flowing.clear()

    def resume(self) -> None:
        """Forward again, delivering whatever was held during the stall."""
        self._flowing.set()

    def reset(self) -> None:
        """Abort every open connection with a TCP reset (the proxy keeps listening)."""
        for writer in list(self._writers):
            _abort(writer)
        self._writers.clear()
        for task in list(self._tasks):
            task.cancel()

    async def close(self) -> None:
        """Stop listening and abort every connection."""
        if self._server is not None:
            self._server.close()
        self.reset()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback that starts a task the proxy owns: reset() cancels
        # these tasks, and asyncio's own client tasks must not end cancelled.
        self.connections_accepted += 1
        self._writers.add(writer)
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            await self._flowing.wait()
            up_reader, upstream = await asyncio.open_connection(self.target_host, self.target_port)
            self._writers.add(upstream)
            async with asyncio.TaskGroup() as group:
                group.create_task(self._pump(reader, upstream))
                group.create_task(self._pump(up_reader, writer))
        except* OSError:
            pass  # a peer hung up or was reset: the finally closes the other side too
        finally:
            for w in (writer, upstream):
                if w is not None:
                    self._writers.discard(w)
                    _abort(w)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while data := await src.read(_CHUNK):
            await self._flowing.wait()
            dst.write(data)
            await dst.drain()
        # The peer hung up. A stalled network delivers that no sooner than
        # data; then the other side is closed too (the other pump ends with it).
        await self._flowing.wait()
        raise ConnectionResetError("peer closed")


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with RST: SO_LINGER 0 makes the kernel reset rather than finish.

    The transport closes its socket only at the loop's next turn, so the
    socket is shut down here first: the peer sees the connection end now,
    as it would see a reset that came from the network."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.shutdown(socket.SHUT_RDWR)
    writer.transport.abort()
