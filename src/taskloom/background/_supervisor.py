"""The keeper, a process supervisor: runs one command and answers for every
process it starts. Background commands (`_process.py`) and stdio MCP servers
(`taskloom.mcp`) run one each:

    python -I -S _supervisor.py FD GRACE BACKSTOP LC_CTYPE ARGV...
    python -I -S _supervisor.py stdio:PID GRACE - LC_CTYPE ARGV...

Standard library only and single-threaded (its fork-then-exec is safe). It
starts ARGV, leading a new session, below a *nanny* that waits for it and
passes its exit status up. As a child subreaper it keeps what the command
starts below it even after `setsid` or a double fork: its descendants in
`/proc` are exactly what the command started, and nothing else is
signalled. A command that kills its parent dies of its parent-death signal.
The end of the host's socket (FD) is the host's death: every descendant is
SIGKILLed. BACKSTOP (seconds, or `-`) is the deadline for a hung host.
LC_CTYPE is `=VALUE` or `-` (Python may have set it, PEP 538). The socket
carries `started PID`, `failed ERRNO`, `exited CODE` (negative: a signal)
and `deadline` up, and `T` down (SIGTERM all, SIGKILL GRACE seconds later).

With `stdio:PID` the command speaks over the stdin and stdout it inherits;
the tree ends once it exited, at once with SIGKILL on SIGTERM, SIGINT or
SIGHUP, or when the host PID dies. A command that cannot start is named on
stderr (status 127). Limits: killing the keeper itself orphans the tree to
init; without a subreaper or `/proc` only the process group is signalled.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import NoReturn

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_KILL_ROUND = 0.05
"""Seconds between SIGKILL rounds while killing: processes forked since the
last round are found in the next one."""


def _prctl() -> Callable[[int, int], bool] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.prctl
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    call.restype = ctypes.c_int

    def prctl(option: int, value: int) -> bool:
        return int(call(option, value, 0, 0, 0)) == 0

    return prctl


def _stat(pid: int) -> tuple[int, int] | None:
    """`(parent pid, start time)` of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name in parentheses may hold spaces and parentheses itself.
    fields = data.rsplit(b")", 1)[1].split()
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> list[tuple[int, int]]:
    """`(pid, start time)` of every process below `root`, read from `/proc`."""
    children: dict[int, list[tuple[int, int]]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        stat = _stat(int(name))
        if stat is not None:
            children.setdefault(stat[0], []).append((int(name), stat[1]))
    found: list[tuple[int, int]] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child[0])
    return found


def _send(pid: int, started: int, sig: int) -> None:
    """Signal the process `pid` only if it is still the one that started at
    `started` (a pidfd makes that certain; without one, nearly)."""
    try:
        fd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None  # no pidfds here, or it is gone
    try:
        stat = _stat(pid)
        if stat is None or stat[1] != started:
            return  # gone, or the pid names another process now
        with contextlib.suppress(OSError):
            if fd is None:
                os.kill(pid, sig)
            else:
                signal.pidfd_send_signal(fd, sig)
    finally:
        if fd is not None:
            os.close(fd)


class Keeper:
    """One command and its descendants; `host` is the socket to the host
    (None for `stdio:PID`)."""

    def __init__(self, host: socket.socket | None, grace: float) -> None:
        self._host = host
        self._serving = host is None
        self._grace = grace
        self._me = os.getpid()
        self._prctl = _prctl()
        subreaper = self._prctl is not None and self._prctl(PR_SET_CHILD_SUBREAPER, 1)
        # Without a subreaper or /proc the tree cannot be followed; the
        # command's process group can (a group id is not reused while the
        # group has members).
        self._by_group = not (subreaper and os.path.isdir("/proc/self"))
        self._listening = True
        self._told = False
        self._child = 0
        self._nanny = 0
        self._status = -1
        self._heard: list[int] = []
        self._exit_code: int | None = None
        self._killing = False
        self._kill_at: float | None = None
        self._pending: list[int] = []
        self._wake, self._wake_w = os.pipe()
        os.set_blocking(self._wake, False)
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGCHLD, *_ENDING_SIGNALS):
            signal.signal(sig, self._note)

    def die_with(self, host_pid: int) -> bool:
        """Have the tree ended when process `host_pid`, our parent, dies; False
        if it is already gone."""
        if self._prctl is not None:
            self._prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        return os.getppid() == host_pid

    def run(self, argv: list[str], backstop: float | None, lc_ctype: str | None) -> int:
        try:
            self._child = self._spawn(argv, lc_ctype)
        except OSError as exc:
            self._say(f"failed {exc.errno or 0}")
            if self._serving:
                with contextlib.suppress(OSError):
                    os.write(2, f"taskloom: cannot run {argv[0]}: {exc.strerror}\n".encode())
            return 127
        if self._serving:
            # The command's stdin and stdout are its own: the host sees them
            # end once the command (and what inherited them) is gone.
            _release_stdio((0, 1))
        self._say(f"started {self._child}")
        deadline = None if backstop is None else time.monotonic() + backstop
        while True:
            children_left = self._reap()
            if self._serving and self._exit_code is not None and not self._told:
                self._told = True
                self._terminate()
            # Ending the group needs the host's word: its members are not
            # our children, so their end is not seen here.
            if (
                self._exit_code is not None
                and not children_left
                and (not self._by_group or self._told)
            ):
                # The exit status that tells it (negative: killed by that signal).
                code = self._exit_code
                return code if code >= 0 else 128 - code
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                deadline = None
                self._say("deadline")
                self._terminate()
            if self._kill_at is not None and now >= self._kill_at:
                self._killing = True
            if self._killing:
                self._signal_all(signal.SIGKILL)
            self._wait(self._timeout(now, deadline))

    def _spawn(self, argv: list[str], lc_ctype: str | None) -> int:
        """Start the nanny, and through it the command; the command's pid."""
        # Closed by a successful exec; otherwise it carries the exec's errno.
        report_r, report_w = os.pipe()
        # The nanny's word: the command's pid, then its exit code.
        status_r, status_w = os.pipe()
        nanny = os.fork()
        if nanny == 0:  # pragma: no cover - the nanny exits
            os.close(report_r)
            os.close(status_r)
            self._be_nanny(argv, lc_ctype, report_w, status_w)
        os.close(report_w)
        os.close(status_w)
        self._nanny, self._status = nanny, status_r
        with open(report_r, "rb") as report:
            failure = report.read()
        if failure:
            os.waitpid(nanny, 0)
            code = int(failure)
            raise OSError(code, os.strerror(code))
        # The nanny wrote the pid before it let go of the report pipe.
        self._hear_nanny()
        if not self._heard:
            os.waitpid(nanny, 0)  # it died before starting the command
            raise OSError(errno.ECHILD, os.strerror(errno.ECHILD))
        return self._heard[0]

    def _be_nanny(
        self, argv: list[str], lc_ctype: str | None, report_w: int, status_w: int
    ) -> NoReturn:  # pragma: no cover - runs in the nanny
        """Start the command as our child, wait for it, pass its exit code up."""
        try:
            signal.set_wakeup_fd(-1)
            os.close(self._wake)
            os.close(self._wake_w)
            if self._host is not None:
                self._host.close()
            # The tree's SIGTERM is for the command; the nanny goes when it does.
            for sig in _ENDING_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            if self._prctl is not None:
                self._prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
                if os.getppid() != self._me:
                    os._exit(1)  # the keeper died before the signal was set
            me = os.getpid()
            pid = os.fork()
            if pid == 0:
                os.close(status_w)
                self._exec(argv, lc_ctype, me, report_w)
            os.write(status_w, f"{pid}\n".encode())
            os.close(report_w)
            _release_stdio((0, 1, 2))
            _, status = os.waitpid(pid, 0)
            os.write(status_w, f"{os.waitstatus_to_exitcode(status)}\n".encode())
        finally:
            os._exit(0)

    def _exec(
        self, argv: list[str], lc_ctype: str | None, parent: int, report_w: int
    ) -> NoReturn:  # pragma: no cover - the command execs or exits
        try:
            os.setsid()
            # Python ignores SIGPIPE and SIGXFSZ; the command expects the defaults.
            for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, *_ENDING_SIGNALS):
                signal.signal(sig, signal.SIG_DFL)
            if lc_ctype is None:
                os.environ.pop("LC_CTYPE", None)
            else:
                os.environ["LC_CTYPE"] = lc_ctype
            if self._prctl is not None:
                self._prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
                if os.getppid() != parent:
                    os._exit(1)  # the nanny died before the signal was set
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(report_w, str(exc.errno or 0).encode())
        finally:
            os._exit(127)

    def _hear_nanny(self) -> None:
        """Add what the nanny has written to `_heard`: the command's pid, then
        its exit code (each line is written at once, so whole)."""
        data = b""
        with contextlib.suppress(OSError):
            while chunk := os.read(self._status, 64):
                data += chunk
                if data.endswith(b"\n"):
                    break
        self._heard += [int(word) for word in data.split()]

    def _reap(self) -> bool:
        """Reap every exited child; whether any child is left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self._nanny:
                # The command's exit code; a nanny killed before it could
                # tell took the command with it (parent-death signal).
                os.set_blocking(self._status, False)
                self._hear_nanny()
                os.close(self._status)
                if len(self._heard) > 1:
                    self._exit_code = self._heard[1]
                else:
                    self._exit_code = os.waitstatus_to_exitcode(status)
                self._say(f"exited {self._exit_code}")

    def _terminate(self) -> None:
        self._signal_all(signal.SIGTERM)
        if self._kill_at is None:
            self._kill_at = time.monotonic() + self._grace

    def _signal_all(self, sig: int) -> None:
        if self._by_group:
            with contextlib.suppress(OSError):
                os.killpg(self._child, sig)
        for pid, started in descendants(self._me):
            _send(pid, started, sig)

    def _timeout(self, now: float, deadline: float | None) -> float | None:
        moments = [m for m in (deadline, self._kill_at) if m is not None]
        timeout = max(0.0, min(moments) - now) if moments else None
        if self._killing:
            timeout = _KILL_ROUND if timeout is None else min(timeout, _KILL_ROUND)
        return timeout

    def _wait(self, timeout: float | None) -> None:
        """Until a signal, a word from the host, or `timeout` seconds."""
        watched: list[int] = [self._wake]
        if self._listening and self._host is not None:
            watched.append(self._host.fileno())
        readable, _, _ = select.select(watched, [], [], timeout)
        if self._wake in readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake, 512):
                    pass
        noted, self._pending = self._pending, []
        if any(sig in _ENDING_SIGNALS for sig in noted):
            self._killing = self._told = True
        if self._host is not None and self._host.fileno() in readable:
            try:
                data = self._host.recv(512)
            except OSError:
                data = b""
            if not data:
                # The host is gone, or asks for the end (it still reads what
                # follows): kill everything.
                self._killing = self._told = True
                self._listening = False
            elif b"T" in data:
                self._told = True
                self._terminate()

    def _note(self, signum: int, frame: object) -> None:
        self._pending.append(signum)

    def _say(self, line: str) -> None:
        if self._host is not None:
            with contextlib.suppress(OSError):
                self._host.sendall(line.encode() + b"\n")


def _release_stdio(fds: tuple[int, ...]) -> None:
    """Point `fds` at /dev/null: the command's pipes are no longer held here."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        os.dup2(null, fd)
    os.close(null)


def main(args: list[str]) -> int:
    where, grace, backstop, lc_ctype, argv = args[0], float(args[1]), args[2], args[3], args[4:]
    if where.startswith("stdio:"):
        keeper = Keeper(None, grace)
        if not keeper.die_with(int(where.removeprefix("stdio:"))):
            return 1  # the host died while we started: nothing to serve
    else:
        host = socket.socket(fileno=int(where))
        # Inherited from the host on purpose; the command must not hold it.
        host.set_inheritable(False)
        keeper = Keeper(host, grace)
    return keeper.run(
        argv,
        None if backstop == "-" else float(backstop),
        lc_ctype[1:] if lc_ctype.startswith("=") else None,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
