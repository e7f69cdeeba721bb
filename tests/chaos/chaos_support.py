"""What the chaos tests share: the durable stores, child processes, and log checks."""

from __future__ import annotations

import itertools
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from session_child import effect_tools

from pg import PG_DSN, requires_postgres
from taskloom import Agent, Message, RunStatus, Runtime
from taskloom.entries import Entry, EntryKind
from taskloom.models import ScriptedModel, reply

CHILD = Path(__file__).with_name("session_child.py")

__all__ = [
    "CHILD",
    "Child",
    "durable",
    "log_problems",
    "messages_of",
    "parked_and_approved",
    "store_name",
    "summary",
]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=requires_postgres)])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`(url, schema)` of a durable store: a SQLite file, or a private PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'chaos.db'}", "-"
    else:
        yield PG_DSN, request.getfixturevalue("pg_schema")


def store_name(url: str) -> str:
    """`sqlite` or `postgres`, for the printed counts."""
    return url.partition(":")[0].removesuffix("ql")


class Child:
    """A session_child.py process; its stdout lines arrive on a queue so every
    wait has a deadline, and only this pid is ever killed."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, line: str) -> None:
        """Write one line to the child's stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def expect(self, prefix: str, timeout: float = 30) -> str:
        """The next line starting with `prefix` (others are skipped)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"child exited before {prefix!r}: {self.stderr()}")
            if line.startswith(prefix):
                return line
        raise AssertionError(f"child did not print {prefix!r} within {timeout}s")

    def stderr(self) -> str:
        """What the child wrote to stderr (waits for it to exit)."""
        if self.proc.stderr is None:
            return ""
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return "(still running)"
        return self.proc.stderr.read()[-3000:]

    def wait(self, timeout: float = 60) -> int:
        """The exit status, once the child ended by itself."""
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL this child (if still running) and reap it."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.close()

    def close(self) -> None:
        """End stdin (a worker exits on EOF), reap, and close the pipes."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def messages_of(entries: Sequence[Entry]) -> list[Message]:
    """The messages of a log, in order."""
    return [Message.from_dict(e.data["message"]) for e in entries if e.kind == EntryKind.MESSAGE]


def log_problems(entries: Sequence[Entry]) -> list[str]:
    """What breaks "one writer per session" in a finished log.

    Every tool call has exactly one result; an assistant turn's results are
    the very next message, in call order; and runs do not interleave: no run
    writes between the first and the last entry of another. (Entries without
    a run, like decisions, may come from anyone at any time.)
    """
    problems: list[str] = []
    results: dict[str, int] = {}
    calls: list[str] = []
    waiting: list[str] = []
    for m in messages_of(entries):
        if m.role == "tool":
            ids = [r.tool_call_id for r in m.results]
            for i in ids:
                results[i] = results.get(i, 0) + 1
            if ids != waiting:
                problems.append(f"results {ids} answer a turn that asked {waiting}")
            waiting = []
            continue
        if waiting:
            problems.append(f"a {m.role} message came before the results of {waiting}")
            waiting = []
        if m.role == "assistant":
            waiting = [c.id for c in m.tool_calls]
            calls.extend(waiting)
    for call_id in calls:
        if results.get(call_id, 0) != 1:
            problems.append(f"call {call_id} has {results.get(call_id, 0)} results")
    spans: dict[str, list[int]] = {}
    for e in entries:
        if e.run_id is not None:
            spans.setdefault(e.run_id, [e.position, e.position])[1] = e.position
    ordered = sorted(spans.items(), key=lambda item: item[1][0])
    for (run, (_, last)), (other, (first, _)) in itertools.pairwise(ordered):
        if first < last:
            problems.append(f"run {other[:8]} wrote at {first}, inside run {run[:8]} (to {last})")
    return problems


def summary(label: str, trials: int, **counts: int) -> str:
    """`label: N trials, name count, ...`, printed for `pytest -s`."""
    parts = ", ".join(f"{name.replace('_', ' ')} {n}" for name, n in counts.items())
    line = f"{label}: {trials} trials, {parts}"
    print(line)
    return line


async def parked_and_approved(runtime: Runtime, side_effects: Path) -> str:
    """A new session whose turn is parked on a gated `pay` call (id `call_pay`),
    approved; returns its id."""
    model = ScriptedModel([reply(tool_calls=[("pay", {"amount": 5}, "call_pay")])])
    session = await runtime.create_session(Agent("chaos", model, tools=effect_tools(side_effects)))
    parked = await session.run("pay 5")
    assert parked.status is RunStatus.AWAITING_APPROVAL
    await session.approve("call_pay")
    return session.id
