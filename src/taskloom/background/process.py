"""One command run as a child process, for the background command tools.

The command leads its own process group (`start_new_session=True`), so
ending it means ending the group: whatever it spawned — a pipeline, a
server it put in the background — goes with it, on timeout, on stop and
after a normal exit alike. Ending is `SIGTERM` to the group, then `SIGKILL`
to whatever is left after a short grace.

Standard output and standard error are read together through one pipe into
an `OutputCapture`, which keeps only the head and the tail of the text and,
once the output outgrows them, writes all of it to a spill file.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..errors import CommandNotStarted
from .activities import NoticeStatus

__all__ = [
    "CapturedOutput",
    "CommandNotStarted",
    "CommandProcess",
    "CommandResult",
    "OutputCapture",
    "format_seconds",
]

_READ_SIZE = 64 * 1024

_DRAIN_SECONDS = 1.0
"""The least time the rest of the output gets to arrive once the group has ended."""


@dataclass(frozen=True, slots=True)
class CapturedOutput:
    """A command's output as kept: `head` and `tail` of `total_chars` characters.

    When nothing was cut, `head + tail` is the whole output. `spill_path`
    names the file holding all of it when it was cut; `spill_error` says why
    that file could not be written, if it could not.
    """

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
    """Collects a byte stream as text, keeping `head_chars` and `tail_chars` of it.

    Bytes are decoded as UTF-8 (invalid sequences replaced). While the text
    fits in head and tail it is all kept in memory; the moment it outgrows
    them, everything so far is written to the file `spill_path()` names (its
    folder is created), and every later chunk is appended there — memory
    stays bounded by the caps whatever the command prints. A spill file that
    cannot be written is reported, not raised: the capped output survives.
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
            path.parent.mkdir(parents=True, exist_ok=True)
            # newline="": the file holds the output byte for byte as decoded.
            self._spill = path.open("w", encoding="utf-8", newline="")
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
    """How a command ended and what it printed.

    `status` is a `NoticeStatus`: `done` (exit code 0), `failed` (another
    exit code, or killed by a signal nobody here sent), `timed_out` or
    `stopped`. `exit_code` is the leader's return code, negative for the
    signal that ended it. `duration` is in seconds.
    """

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
        if not out.is_truncated:
            shown = out.render().rstrip("\n")
            return f"{text}; output:\n{shown}"
        if out.spill_path is not None and out.spill_error is None:
            where = f"the full output is in {out.spill_path}"
        elif out.spill_error is not None:
            where = f"saving the full output failed: {out.spill_error}"
        else:
            where = "the full output was not saved"
        shown = out.render().rstrip("\n")
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
    """A started command: the leader of its own process group, its output being read.

    Start with `await CommandProcess.start(...)`; then `wait(timeout)` for it
    to end on its own (killed when the timeout passes) or `stop()` it. Use it
    as an async context manager: leaving the block kills the group at once
    if neither `wait` nor `stop` finished, so no path leaves processes behind.
    `grace` is how long the group gets between `SIGTERM` and `SIGKILL`.
    """

    def __init__(
        self,
        command: str,
        process: asyncio.subprocess.Process,
        output: OutputCapture,
        grace: float,
    ) -> None:
        assert process.stdout is not None
        self.command = command
        self._process = process
        self._output = output
        self._grace = grace
        self._started = time.monotonic()
        self._pump = asyncio.get_running_loop().create_task(self._read(process.stdout))
        self._result: CommandResult | None = None

    @classmethod
    async def start(
        cls,
        command: str,
        argv: Sequence[str],
        *,
        output: OutputCapture,
        cwd: str | None = None,
        grace: float = 2.0,
    ) -> CommandProcess:
        """Start `argv` (no shell is involved unless argv names one).

        `command` is how the command is shown in results. Raises
        `CommandNotStarted` when it cannot be started.
        """
        if not argv:
            raise CommandNotStarted("the command is empty")
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            # The one error shared by a missing program and a missing cwd;
            # the file name tells them apart.
            if cwd is not None and exc.filename == cwd:
                raise CommandNotStarted(f"working directory not found: {cwd}") from None
            raise CommandNotStarted(f"command not found: {argv[0]}") from None
        except PermissionError:
            raise CommandNotStarted(f"permission denied: {argv[0]}") from None
        except OSError as exc:
            raise CommandNotStarted(f"{type(exc).__name__}: {exc}") from None
        return cls(command, process, output, grace)

    @property
    def pid(self) -> int:
        """The leader's process id, which is also the group id."""
        return self._process.pid

    async def wait(self, timeout: float | None) -> CommandResult:
        """Wait for the command to exit; after `timeout` seconds, kill it.

        Either way what the command left running in its group is ended too.
        Cancelling this call leaves the command running (call `stop`, or
        leave the context manager).
        """
        try:
            async with asyncio.timeout(timeout):
                await self._process.wait()
        except TimeoutError:
            return await self._end(NoticeStatus.TIMED_OUT)
        code = self._process.returncode
        return await self._end(NoticeStatus.DONE if code == 0 else NoticeStatus.FAILED)

    async def stop(self) -> CommandResult:
        """End the command now; the result holds what it printed so far."""
        if self._result is not None:
            return self._result
        return await self._end(NoticeStatus.STOPPED)

    def kill(self) -> None:
        """`SIGKILL` the whole group without waiting (for paths that cannot await)."""
        if self._result is None:
            _signal_group(self._process.pid, signal.SIGKILL)
            self._pump.cancel()

    async def __aenter__(self) -> CommandProcess:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.kill()

    async def _end(self, status: str) -> CommandResult:
        try:
            await self._end_group()
        except BaseException:
            # Interrupted while ending (a second cancellation): no more
            # waiting, but nothing of the group may survive either.
            self.kill()
            raise
        code = self._process.returncode
        self._result = CommandResult(
            self.command,
            status,
            code if code is not None else -signal.SIGKILL,
            time.monotonic() - self._started,
            self._output.finish(),
        )
        return self._result

    async def _end_group(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._grace
        pgid = self._process.pid
        # The group outlives its leader when the leader's children live on,
        # so the group is signalled even after the leader exited by itself.
        if _signal_group(pgid, signal.SIGTERM):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await self._process.wait()
                    # The pipe closes when its last writer is gone: the
                    # earliest sign that the whole group has ended.
                    await asyncio.shield(self._pump)
            _signal_group(pgid, signal.SIGKILL)
        await self._process.wait()
        # A process that left the group (its own setsid) may still hold the
        # pipe open; its output is not worth hanging for.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(self._grace, _DRAIN_SECONDS)):
                await asyncio.shield(self._pump)
        self._pump.cancel()

    async def _read(self, stream: asyncio.StreamReader) -> None:
        try:
            while chunk := await stream.read(_READ_SIZE):
                self._output.feed(chunk)
        except OSError:
            pass  # a broken pipe ends the output; the exit code still tells


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send `sig` to the group; False when none of its processes is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # A member that changed its user (a setuid program): out of reach,
        # but still there.
        return True
    return True


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
