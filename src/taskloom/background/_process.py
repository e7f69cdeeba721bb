"""One command run as a child process, for the background command tools.

Each command runs under a keeper (`_supervisor.py`), a small process that answers
for every process the command starts (also those that leave its process
group or session) and kills them all when this process dies, even by
`SIGKILL` (on Linux). Ending a command ends that whole tree, on timeout, on
stop and after a normal exit alike: `SIGTERM` to every process of it, then
`SIGKILL` after a short grace. Only the command's descendants are signalled.

Standard output and standard error are read together through one pipe into
an `OutputCapture`, which keeps the head and the tail and spills the whole
output to a file readable by this user only once it outgrows them.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..backends import NoticeStatus
from ..errors import CommandNotStarted

_READ_SIZE = 64 * 1024

_DRAIN_SECONDS = 1.0
"""The least time the rest of the output gets to arrive once the tree has ended."""

_KEEPER = Path(__file__).with_name("_supervisor.py")

_KEEPER_EXIT_SECONDS = 5.0
"""How long a keeper told to kill everything gets to report that nothing is left."""

_NO_SIGPIPE = getattr(socket, "MSG_NOSIGNAL", 0)


@dataclass(frozen=True, slots=True)
class CapturedOutput:
    """A command's output as kept: `head` and `tail` of `total_chars` characters
    (the whole output when nothing was cut); `spill_path` names the file holding
    all of it when it was cut, `spill_error` why that file could not be written."""

    head: str
    tail: str
    total_chars: int
    spill_path: Path | None = None
    spill_error: str | None = None

    @property
    def is_truncated(self) -> bool:
        """Whether the middle of the output was cut."""
        return self.total_chars > len(self.head) + len(self.tail)

    def render(self) -> str:
        """The kept output as text, with a marker where the middle was cut."""
        if not self.is_truncated:
            return self.head + self.tail
        omitted = self.total_chars - len(self.head) - len(self.tail)
        return f"{self.head}\n[... {omitted} characters omitted ...]\n{self.tail}"


class OutputCapture:
    """Collects a byte stream as UTF-8 text, keeping `head_chars` and `tail_chars` of it.

    Once the text outgrows head and tail, all of it goes to the file
    `spill_path()` names (created new, mode 0600, its folder 0700) and later
    chunks are appended there, so memory stays bounded. A spill file that
    cannot be written is reported, not raised.
    """

    def __init__(self, head_chars: int, tail_chars: int, spill_path: Callable[[], Path]) -> None:
        if head_chars < 0 or tail_chars < 0:
            raise ValueError("head_chars and tail_chars must not be negative")
        self._head_chars = head_chars
        self._tail_chars = tail_chars
        self._spill_path = spill_path
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head = ""
        self._tail = ""
        self._total = 0
        # Everything so far, until it outgrows the caps and moves to the spill file.
        self._unspilled: list[str] | None = []
        self._spill: TextIO | None = None
        self._path: Path | None = None
        self._error: str | None = None

    def feed(self, data: bytes) -> None:
        """Add a chunk of the stream."""
        self._add(self._decoder.decode(data))

    def finish(self) -> CapturedOutput:
        """Flush the decoder, close the spill file and return what was kept."""
        self._add(self._decoder.decode(b"", final=True))
        if self._spill is not None:
            try:
                self._spill.close()
            except OSError as exc:
                self._error = str(exc)
            self._spill = None
        return CapturedOutput(self._head, self._tail, self._total, self._path, self._error)

    def _add(self, text: str) -> None:
        if not text:
            return
        self._total += len(text)
        self._keep_for_spill(text)
        room = self._head_chars - len(self._head)
        if room > 0:
            self._head += text[:room]
            text = text[room:]
        if text and self._tail_chars > 0:
            self._tail = (self._tail + text)[-self._tail_chars :]

    def _keep_for_spill(self, text: str) -> None:
        if self._spill is not None:
            self._write(text)
            return
        if self._unspilled is None:
            return  # the spill file failed: only head and tail are kept
        self._unspilled.append(text)
        if self._total <= self._head_chars + self._tail_chars:
            return
        kept, self._unspilled = self._unspilled, None
        try:
            path = self._spill_path()
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # Private: output may hold secrets. O_EXCL: never write through a
            # file or a link someone else put there first.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                # newline="": the file holds the output byte for byte as decoded.
                self._spill = open(fd, "w", encoding="utf-8", newline="")  # noqa: SIM115
            except BaseException:
                os.close(fd)
                raise
            self._path = path
        except OSError as exc:
            self._error = str(exc)
            return
        self._write("".join(kept))

    def _write(self, text: str) -> None:
        assert self._spill is not None
        try:
            self._spill.write(text)
        except OSError as exc:
            self._error = str(exc)
            with contextlib.suppress(OSError):
                self._spill.close()
            self._spill = None


@dataclass(frozen=True, slots=True)
class CommandResult:
    """How a command ended and what it printed: `status` is a `NoticeStatus`
    (`done` for exit code 0, `failed`, `timed_out` or `stopped`), `exit_code`
    the leader's return code (negative: the signal), `duration` in seconds."""

    command: str
    status: str
    exit_code: int
    duration: float
    output: CapturedOutput

    def render(self) -> str:
        """The text the model reads: outcome, exit code, duration, output."""
        text = f"`{self.command}` {self._outcome()}"
        out = self.output
        if out.total_chars == 0:
            return text + "; no output"
        shown = out.render().rstrip("\n")
        if not out.is_truncated:
            return f"{text}; output:\n{shown}"
        if out.spill_path is not None and out.spill_error is None:
            where = f"the full output is in {out.spill_path}"
        elif out.spill_error is not None:
            where = f"saving the full output failed: {out.spill_error}"
        else:
            where = "the full output was not saved"
        return f"{text}; output ({out.total_chars} characters, middle cut; {where}):\n{shown}"

    def _outcome(self) -> str:
        took = format_seconds(self.duration)
        ended = _exit_text(self.exit_code)
        if self.status == NoticeStatus.TIMED_OUT:
            return f"timed out after {took} and was killed ({ended})"
        if self.status == NoticeStatus.STOPPED:
            return f"was stopped after {took} ({ended})"
        hint = {126: " (not executable)", 127: " (command not found)"}.get(self.exit_code, "")
        return f"{ended}{hint} after {took}"


class CommandProcess:
    """A started command, under its keeper, its output being read.

    `await CommandProcess.start(...)`, then `wait(timeout)` or `stop()`. As an
    async context manager, leaving the block kills the whole tree at once if
    neither finished. `grace`: seconds between `SIGTERM` and `SIGKILL`.
    """

    def __init__(
        self,
        command: str,
        keeper: _KeeperLink,
        stdout: asyncio.StreamReader,
        stdout_pipe: asyncio.BaseTransport,
        output: OutputCapture,
        grace: float,
    ) -> None:
        self.command = command
        self._keeper = keeper
        self._stdout_pipe = stdout_pipe
        self._output = output
        self._grace = grace
        self._started = time.monotonic()
        self._pump = asyncio.get_running_loop().create_task(self._read(stdout))
        self._result: CommandResult | None = None

    @classmethod
    async def start(
        cls,
        command: str,
        argv: Sequence[str],
        *,
        output: OutputCapture,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        grace: float = 2.0,
        backstop: float | None = None,
    ) -> CommandProcess:
        """Start `argv` (no shell unless argv names one) under a keeper.

        `command` is how it is shown in results; `env` its whole environment
        (None: this process's). Past `backstop` seconds the keeper ends the
        command even if this process never asks, and the result says it timed
        out. Raises `CommandNotStarted` when it cannot be started.
        """
        if not argv:
            raise CommandNotStarted("the command is empty")
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        out_r, out_w = os.pipe()
        try:
            popen = _spawn_keeper(theirs, out_w, argv, cwd, env, grace, backstop)
        except BaseException:
            ours.close()
            os.close(out_r)
            raise
        finally:
            theirs.close()
            os.close(out_w)
        keeper = _KeeperLink(popen, ours)
        stdout_pipe: asyncio.BaseTransport | None = None
        try:
            stdout = asyncio.StreamReader()
            stdout_pipe, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(stdout), os.fdopen(out_r, "rb", buffering=0)
            )
            await keeper.answered.wait()
        except BaseException:
            keeper.abandon()
            if stdout_pipe is not None:
                stdout_pipe.close()
            raise
        if keeper.pid is None:
            stdout_pipe.close()
            await keeper.reap()
            raise CommandNotStarted(_not_started(argv[0], keeper.failure, popen.returncode))
        return cls(command, keeper, stdout, stdout_pipe, output, grace)

    async def wait(self, timeout: float | None) -> CommandResult:
        """Wait for the command to exit, killing it after `timeout` seconds; what
        it left running is ended too. Cancelled, it leaves the command running."""
        try:
            async with asyncio.timeout(timeout):
                await self._keeper.exited.wait()
        except TimeoutError:
            return await self._end(NoticeStatus.TIMED_OUT)
        if self._keeper.deadline_passed:
            return await self._end(NoticeStatus.TIMED_OUT)
        code = self._keeper.exit_code
        return await self._end(NoticeStatus.DONE if code == 0 else NoticeStatus.FAILED)

    async def stop(self) -> CommandResult:
        """End the command now; the result holds what it printed so far."""
        if self._result is not None:
            return self._result
        return await self._end(NoticeStatus.STOPPED)

    def kill(self) -> None:
        """`SIGKILL` the whole tree without waiting (for paths that cannot await)."""
        if self._result is None:
            self._keeper.abandon()
            self._pump.cancel()
            self._stdout_pipe.close()

    async def __aenter__(self) -> CommandProcess:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.kill()

    async def _end(self, status: str) -> CommandResult:
        try:
            await self._end_tree()
        except BaseException:
            # Interrupted while ending (a second cancellation): no more
            # waiting, but nothing of the tree may survive either.
            self.kill()
            raise
        code = self._keeper.exit_code
        self._result = CommandResult(
            self.command,
            status,
            code if code is not None else -signal.SIGKILL,
            time.monotonic() - self._started,
            self._output.finish(),
        )
        return self._result

    async def _end_tree(self) -> None:
        keeper = self._keeper
        # Also after the command exited by itself: what it started may live on.
        keeper.terminate()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._grace):
                # The keeper exits once nothing of the tree is left; the pipe
                # closes when its last writer is gone.
                await keeper.gone.wait()
                await asyncio.shield(self._pump)
        keeper.kill()
        try:
            async with asyncio.timeout(_KEEPER_EXIT_SECONDS):
                await keeper.gone.wait()
        except TimeoutError:
            # Something cannot die yet (uninterruptible, or another user's
            # now); the keeper goes on killing it without us.
            keeper.abandon()
        else:
            await keeper.reap()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(self._grace, _DRAIN_SECONDS)):
                await asyncio.shield(self._pump)
        self._pump.cancel()
        self._stdout_pipe.close()

    async def _read(self, stream: asyncio.StreamReader) -> None:
        try:
            while chunk := await stream.read(_READ_SIZE):
                self._output.feed(chunk)
        except OSError:
            pass  # a broken pipe ends the output; the exit code still tells


class _KeeperLink:
    """This process's end of a command's keeper: socket `T` is `SIGTERM`, its end `SIGKILL`."""

    def __init__(self, popen: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.popen = popen
        self.pid: int | None = None
        self.failure: int | None = None
        """The errno of a command that could not be started."""
        self.exit_code: int | None = None
        self.deadline_passed = False
        self.answered = asyncio.Event()
        """Set once the keeper said whether the command started (or is gone)."""
        self.exited = asyncio.Event()
        """Set once the command exited (or its keeper is gone)."""
        self.gone = asyncio.Event()
        """Set once the keeper exited: nothing of the command's tree is left."""
        self._sock = sock
        self._buffer = b""
        self._loop = asyncio.get_running_loop()
        sock.setblocking(False)
        self._loop.add_reader(sock.fileno(), self._readable)
        self._listening = True

    def terminate(self) -> None:
        """`SIGTERM` to every process of the tree; `SIGKILL` a grace later."""
        with contextlib.suppress(OSError):
            self._sock.send(b"T", _NO_SIGPIPE)

    def kill(self) -> None:
        """`SIGKILL` to every process of the tree until none is left; the keeper then exits."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)

    def abandon(self) -> None:
        """Kill the tree and stop listening; a thread reaps the keeper once it exits."""
        self._detach()
        self._sock.close()
        if self.popen.poll() is None:
            threading.Thread(target=self.popen.wait, name="taskloom-keeper", daemon=True).start()

    async def reap(self) -> None:
        """Collect the keeper once it is gone (it exits right after its socket closed)."""
        await self.gone.wait()
        if self.popen.poll() is None:
            await asyncio.to_thread(self.popen.wait)
        self._sock.close()

    def _readable(self) -> None:
        try:
            data = self._sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._detach()
            return
        *lines, self._buffer = (self._buffer + data).split(b"\n")
        for line in lines:
            self._hear(line.decode("ascii", "replace").split())

    def _hear(self, words: list[str]) -> None:
        match words:
            case ["started", pid] if pid.isdigit():
                self.pid = int(pid)
                self.answered.set()
            case ["failed", code] if code.isdigit():
                self.failure = int(code)
                self.answered.set()
            case ["exited", code] if code.lstrip("-").isdigit():
                self.exit_code = int(code)
                self.exited.set()
            case ["deadline"]:
                self.deadline_passed = True
            case _:
                pass  # the keeper says nothing else

    def _detach(self) -> None:
        if self._listening:
            self._listening = False
            self._loop.remove_reader(self._sock.fileno())
        for event in (self.answered, self.exited, self.gone):
            event.set()


def _spawn_keeper(
    sock: socket.socket,
    out: int,
    argv: Sequence[str],
    cwd: str | None,
    env: Mapping[str, str] | None,
    grace: float,
    backstop: float | None,
) -> subprocess.Popen[bytes]:
    lc_ctype = (os.environ if env is None else env).get("LC_CTYPE")
    args = _keeper_args(str(sock.fileno()), argv, grace, backstop, lc_ctype)
    try:
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            cwd=cwd,
            env=env,
            start_new_session=True,
            pass_fds=(sock.fileno(),),
        )
    except FileNotFoundError as exc:
        if cwd is not None and exc.filename == cwd:
            raise CommandNotStarted(f"working directory not found: {cwd}") from None
        raise CommandNotStarted(f"cannot run the command's keeper: {exc}") from None
    except PermissionError as exc:
        raise CommandNotStarted(f"permission denied: {exc.filename or argv[0]}") from None
    except OSError as exc:
        raise CommandNotStarted(f"{type(exc).__name__}: {exc}") from None


def stdio_keeper_argv(argv: Sequence[str], env: Mapping[str, str], grace: float) -> list[str]:
    """The command line that runs `argv` under a keeper of its own, speaking
    over the keeper's stdin and stdout (a stdio server, say), run as a child
    of this process with `env`. The tree `argv` starts ends once `argv` exits
    (`SIGTERM`, then `SIGKILL` after `grace`), at once when the keeper gets
    `SIGTERM`, and when this process dies. `CommandNotStarted` without a
    Python interpreter."""
    return _keeper_args(f"stdio:{os.getpid()}", argv, grace, None, env.get("LC_CTYPE"))


def _keeper_args(
    where: str, argv: Sequence[str], grace: float, backstop: float | None, lc_ctype: str | None
) -> list[str]:
    if not sys.executable:
        raise CommandNotStarted("no Python interpreter to run the command's keeper")
    return [
        sys.executable,
        "-I",
        "-S",
        str(_KEEPER),
        where,
        repr(float(grace)),
        "-" if backstop is None else repr(float(backstop)),
        "-" if lc_ctype is None else f"={lc_ctype}",
        *argv,
    ]


def _not_started(program: str, errno: int | None, keeper_code: int | None) -> str:
    if errno is None:
        return f"its keeper ended before starting it ({_exit_text(keeper_code or 0)})"
    exc = OSError(errno, os.strerror(errno), program)
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {program}"
    if isinstance(exc, PermissionError):
        return f"permission denied: {program}"
    return f"{type(exc).__name__}: {exc}"


def _exit_text(code: int) -> str:
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"killed by {name}"


def format_seconds(seconds: float) -> str:
    """A duration as the model reads it: `0.02s`, `3.4s`, `2m05s`, `1h02m`."""
    if seconds < 10:
        return f"{seconds:.2f}s" if seconds < 1 else f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
