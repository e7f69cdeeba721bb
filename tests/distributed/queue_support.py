"""What the scale-out tests share: worker processes, the test's own runtime, log checks."""

from __future__ import annotations

import asyncio
import itertools
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import queue_app

from taskloom import Runtime
from taskloom.entries import Entry, EntryKind
from taskloom.log import INTERRUPTED
from taskloom.messages import Message

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"

__all__ = [
    "Workers",
    "interrupted",
    "marks",
    "WorkerProc",
    "host_runtime",
    "killable",
    "log_problems",
    "messages_of",
    "tool_results",
    "until",
]


def worker_env(url: str, schema: str, effects: Path, **extra: str) -> dict[str, str]:
    """The environment of a worker process (and of `host_runtime`)."""
    path = [str(HERE), str(SRC), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "PYTHONUNBUFFERED": "1",
        "TLQ_URL": url,
        "TLQ_SCHEMA": schema,
        "TLQ_EFFECTS": str(effects),
        **extra,
    }


def host_runtime(url: str, schema: str, **options: Any) -> Runtime:
    """The test process's own runtime on the same store and queue (a host)."""
    return queue_app.build(url, schema, **options)


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 60) -> None:
    """Wait for something another process does (bounded; for preconditions only)."""
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


class WorkerProc:
    """A `taskloom worker` process; its stdout lines arrive on a queue so every wait
    has a deadline; stderr goes to a file. Only this pid is ever signalled."""

    def __init__(
        self,
        env: dict[str, str],
        *,
        concurrency: int = 4,
        prefix: Sequence[str] = (),
        args: Sequence[str] = ("--app", "queue_app:make_runtime"),
    ) -> None:
        # Open for the process's whole life; closed in close().
        self.stderr_file = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        command = [
            *prefix,
            sys.executable,
            "-m",
            "taskloom",
            "worker",
            *args,
            "--concurrency",
            str(concurrency),
        ]
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.stderr_file,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, prefix: str, timeout: float = 30) -> str:
        """The next stdout line starting with `prefix` (others are kept in `seen`)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"worker exited before {prefix!r}:\n{self.stderr()[-4000:]}")
            self.seen.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(
            f"worker did not print {prefix!r} within {timeout}s:\n{self.stderr()[-4000:]}"
        )

    def ready(self, timeout: float = 30) -> WorkerProc:
        """Wait for the worker's READY line."""
        self.expect("taskloom worker ready", timeout)
        return self

    def stderr(self) -> str:
        """What the worker logged so far."""
        self.stderr_file.seek(0)
        return self.stderr_file.read()

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL (if still running) and reap."""
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        """Drain (SIGTERM), then kill whatever is left; reap."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.stderr_file.close()


class Workers:
    """The worker processes of one test, all closed at its end."""

    def __init__(
        self, env: dict[str, str], args: Sequence[str] = ("--app", "queue_app:make_runtime")
    ) -> None:
        self.env = env
        self.args = tuple(args)
        self.all: list[WorkerProc] = []

    def start(self, *, concurrency: int = 4, prefix: Sequence[str] = (), **env: str) -> WorkerProc:
        worker = WorkerProc(
            {**self.env, **env}, concurrency=concurrency, prefix=prefix, args=self.args
        )
        self.all.append(worker)
        return worker.ready()

    def close(self) -> None:
        for worker in self.all:
            worker.close()


def killable(
    url: str, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, wake: bool = False
) -> tuple[Path, Workers, Runtime]:
    """For a test that kills workers: the effects file they and the host mark
    (empty), a pool of workers and the host, all with a 2 s lease (a killed
    worker's job is taken up soon), waking on reports with `wake`."""
    effects = tmp_path / "effects.txt"
    effects.touch()
    monkeypatch.setenv("TLQ_EFFECTS", str(effects))
    env = {"TLQ_LEASE_TTL": "2", **({"TLQ_WAKE": "1"} if wake else {})}
    pool = Workers(worker_env(url, schema, effects, **env))
    return effects, pool, host_runtime(url, schema, lease_ttl=2, **({"wake": True} if wake else {}))


def messages_of(entries: Iterable[Entry]) -> list[Message]:
    """The messages of a log, in order."""
    return [Message.from_dict(e.data["message"]) for e in entries if e.kind == EntryKind.MESSAGE]


def tool_results(entries: Iterable[Entry]) -> dict[str, list[str]]:
    """Every result text of every tool call, by call id."""
    out: dict[str, list[str]] = {}
    for m in messages_of(entries):
        for r in m.results:
            out.setdefault(r.tool_call_id, []).append(r.content)
    return out


def log_problems(entries: Sequence[Entry]) -> list[str]:
    """What breaks "one writer per session": a call without exactly one result,
    or a run writing inside another run's span."""
    problems: list[str] = []
    calls = [c.id for m in messages_of(entries) if m.role == "assistant" for c in m.tool_calls]
    results = tool_results(entries)
    for call_id in calls:
        if len(results.get(call_id, [])) != 1:
            problems.append(f"call {call_id} has {len(results.get(call_id, []))} results")
    spans: dict[str, list[int]] = {}
    for e in entries:
        if e.run_id is not None:
            spans.setdefault(e.run_id, [e.position, e.position])[1] = e.position
    ordered = sorted(spans.items(), key=lambda item: item[1][0])
    for (run, (_, last)), (other, (first, _)) in itertools.pairwise(ordered):
        if first < last:
            problems.append(f"run {other[:8]} wrote at {first}, inside run {run[:8]} (to {last})")
    return problems


def marks(effects: Path) -> list[str]:
    """The lines of the side-effect file (`<session> <call id>` per call that ran)."""
    return effects.read_text().splitlines() if effects.exists() else []


def interrupted(entries: Iterable[Entry]) -> list[str]:
    """Call ids answered "interrupted"."""
    return [c for c, texts in tool_results(entries).items() if INTERRUPTED in texts]
