"""How taskloom reaches an MCP server: the launch (a command or a URL), the
SDK transport built from it, the tail of a stdio server's stderr, and a read
stream that tells the connection when the server went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar

import httpx2
from mcp.client import Transport
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from .._redact import credentials, redact, safe_url
from ..background import stdio_keeper_argv
from ..errors import CommandNotStarted

logger = logging.getLogger("taskloom.mcp")

TAIL_BYTES = 4096
"""How much of a stdio server's last stderr output is kept for error messages."""

LEFTOVER_GRACE = 1.0
"""Seconds what a stdio server left running gets between `SIGTERM` and
`SIGKILL` once the server exited."""


@dataclass(frozen=True, slots=True)
class StdioLaunch:
    """A server run as a subprocess, spoken to over its stdin and stdout, with
    the SDK's safe default environment plus `env` (left out of the repr)."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    cwd: str | None = None

    is_process: ClassVar[bool] = True  # a process taskloom starts (and restarts)

    def describe(self) -> str:
        """The command line, for messages."""
        return " ".join([self.command, *self.args])

    def secrets(self) -> tuple[str, ...]:
        """The values of `env`'s credential-named variables (`credentials`)."""
        return credentials(env=dict(self.env))

    def transport(self, errlog: IO[bytes] | None) -> Transport:
        """The SDK's stdio transport to the server run under a keeper, its stderr
        to `errlog` (`FileNotFoundError` or `PermissionError` if it cannot run)."""
        env = get_default_environment() | dict(self.env)
        # Raised here as exec would: the keeper would only say so on the server's stderr.
        command, cwd = self.command, self.cwd
        where = os.path.join(cwd or "", command) if os.sep in command else command
        if shutil.which(where, path=env.get("PATH", os.defpath)) is None:
            if os.sep in command and os.path.exists(where):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), command)
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
        argv = [self.command, *self.args]
        with contextlib.suppress(CommandNotStarted):  # no interpreter: run it directly
            argv = stdio_keeper_argv(argv, env, LEFTOVER_GRACE)
        params = StdioServerParameters(
            command=argv[0], args=argv[1:], env=dict(self.env) or None, cwd=self.cwd
        )
        # The SDK passes errlog to the subprocess as its stderr: any object
        # with a file descriptor does.
        return stdio_client(params, errlog=errlog) if errlog else stdio_client(params)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class HttpLaunch:
    """A server reached over streamable HTTP at `url`; `headers` go with
    every request, never logged, shown or stored (nor the URL's credentials)."""

    url: str
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    is_process: ClassVar[bool] = False  # elsewhere: taskloom only reconnects

    def describe(self) -> str:
        """The URL without its credentials (`safe_url`), for messages and records."""
        return safe_url(self.url)

    def secrets(self) -> tuple[str, ...]:
        """The credential headers' values and the URL's credentials (`credentials`)."""
        return credentials(headers=self.headers, urls=(self.url,))

    def transport(self, errlog: IO[bytes] | None) -> Transport:
        """The SDK's streamable HTTP transport, on a client carrying the headers."""
        return _http_transport(self.url, dict(self.headers))


Launch = StdioLaunch | HttpLaunch


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: Mapping[str, str]) -> AsyncIterator[Any]:
    # The SDK's own defaults: 30 s to connect or write, 5 minutes to read
    # (a server may hold a response stream open that long).
    client = httpx2.AsyncClient(headers=dict(headers), timeout=httpx2.Timeout(30.0, read=300.0))
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


class StderrTail(asyncio.Protocol):
    """The last `TAIL_BYTES` a stdio server wrote to its stderr, drained from a
    pipe as it comes, each line logged at DEBUG (`secrets` redacted)."""

    def __init__(self, label: str, secrets: tuple[str, ...] = ()) -> None:
        self._label = label
        self._secrets = secrets
        self._tail = bytearray()
        self._partial = b""
        read_fd, write_fd = os.pipe()
        self._inode = os.fstat(read_fd).st_ino
        self.writer: IO[bytes] | None = os.fdopen(write_fd, "wb", buffering=0)
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self._transport: asyncio.ReadTransport | None = None
        self._eof = asyncio.Event()

    async def start(self) -> None:
        """Start draining the pipe."""
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.connect_read_pipe(lambda: self, self._reader)

    def spawned(self) -> None:
        """The server has its copy of the pipe: drop ours, so the pipe ends with it."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def eof_received(self) -> bool:
        self._eof.set()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof.set()

    def data_received(self, data: bytes) -> None:
        self._tail += data
        if len(self._tail) > TAIL_BYTES:
            del self._tail[: len(self._tail) - TAIL_BYTES]
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[-TAIL_BYTES:]
        for line in lines:
            said = redact(line.decode("utf-8", "replace"), self._secrets)
            logger.debug("MCP server %r: %s", self._label, said)

    def text(self, lines: int = 8) -> str:
        """The last few lines the server wrote to stderr (empty if none)."""
        text = redact(bytes(self._tail).decode("utf-8", "replace"), self._secrets)
        kept = [line.rstrip() for line in text.splitlines() if line.strip()]
        if len(self._tail) == TAIL_BYTES and kept:
            # Cut mid-line: its start could be the end of a secret.
            kept = kept[1:]
        return "\n".join(kept[-lines:])

    async def settle(self, timeout: float = 0.5) -> None:
        """Wait (briefly) for what the server wrote before it exited to arrive."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._eof.wait()

    def holders(self) -> list[Proc]:
        """The processes whose stderr is this pipe (none where /proc is unreadable)."""
        return [p for p in _processes() if p.stderr_inode == self._inode]

    def close(self) -> None:
        """Release both ends of the pipe."""
        self.spawned()
        if self._transport is not None:
            self._transport.close()
        else:
            self._reader.close()


@dataclass(frozen=True, slots=True)
class Proc:
    """A process as /proc shows it."""

    pid: int
    ppid: int
    pgrp: int
    stderr_inode: int | None


def _processes() -> list[Proc]:
    """This user's live processes (Linux; elsewhere, none)."""
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    found = []
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] in ("Z", "X"):
                continue
            try:
                inode: int | None = os.stat(f"/proc/{name}/fd/2").st_ino
            except OSError:
                inode = None  # another user's process, or no stderr
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        found.append(Proc(int(name), int(fields[1]), int(fields[2]), inode))
    return found


def kill_leftovers(tail: StderrTail, group: int | None) -> list[int]:
    """SIGKILL what a stopped stdio server left: its process group (while a
    member is seen) and any process holding its stderr. Their pids."""
    procs = _processes()
    doomed = {p.pid for p in procs if p.stderr_inode == tail._inode}
    if group is not None:
        doomed |= {p.pid for p in procs if p.pgrp == group}
    for pid in doomed:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return sorted(doomed)


class _WatchedRead:
    """The SDK's read stream (which it iterates), telling `on_end` when it ends
    (the server went away) and `on_garbage` about anything not JSON-RPC."""

    def __init__(
        self, inner: Any, on_end: Callable[[], None], on_garbage: Callable[[Exception], None]
    ) -> None:
        self._inner = inner
        self._on_end = on_end
        self._on_garbage = on_garbage

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            item = await self._inner.__anext__()
        except (StopAsyncIteration, Exception):
            self._on_end()
            raise
        if isinstance(item, Exception):
            self._on_garbage(item)
        return item  # type: ignore[no-any-return]

    async def __aenter__(self) -> _WatchedRead:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._inner.__aexit__(*exc)  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def watched(
    transport: Transport, on_end: Callable[[], None], on_garbage: Callable[[Exception], None]
) -> AsyncIterator[Any]:
    """`transport`, its read stream watched (see `_WatchedRead`)."""
    async with transport as (read, write):
        yield _WatchedRead(read, on_end, on_garbage), write
