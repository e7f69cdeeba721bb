"""Helpers of the MCP tests: the fixture server, results, and the processes
a test started (read from /proc, so a server that outlived its runtime is
seen whoever started it)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskloom.mcp import MCPServer
from taskloom.messages import Message

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "fixture_server.py"


def fixture_stdio(marker: Path | None = None, **options: Any) -> MCPServer:
    """The fixture server, run by taskloom over stdio."""
    args = [str(FIXTURE), "stdio"] + (["--marker", str(marker)] if marker else [])
    options.setdefault("name", "fixture")
    return MCPServer.stdio(sys.executable, args, **options)


@dataclass
class HttpFixture:
    """The fixture server served over streamable HTTP by uvicorn on loopback."""

    process: subprocess.Popen[str]
    port: int
    marker: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def server(self, **options: Any) -> MCPServer:
        options.setdefault("name", "fixture")
        return MCPServer.http(self.url, **options)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_http_fixture(
    marker: Path, port: int = 0, env: dict[str, str] | None = None
) -> HttpFixture:
    """Start the fixture server over HTTP; returns once it printed its READY line."""
    process = subprocess.Popen(
        [sys.executable, str(FIXTURE), "http", "--marker", str(marker), "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("READY "):
        process.kill()
        process.wait(10)
        raise RuntimeError(f"the fixture server did not start: {line!r}")
    return HttpFixture(process, int(line.split()[1]), marker)


def results(messages: Iterable[Message]) -> list[tuple[str, bool, str]]:
    """(tool name, is_error, content) of every tool result, in order."""
    return [
        (b.tool_name, b.is_error, b.content)
        for m in messages
        for b in m.blocks
        if b.type == "tool_result"
    ]


def wait_for_text(path: Path, text: str, timeout: float = 10.0) -> str:
    """The file's content once it holds `text` (another process writes it)."""
    deadline = time.monotonic() + timeout
    while True:
        content = path.read_text() if path.exists() else ""
        if text in content or time.monotonic() > deadline:
            return content
        time.sleep(0.02)


# ---------------------------------------------------------------- processes


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgrp: int
    state: str


def processes() -> dict[int, Proc]:
    """Every process on the machine, from /proc (zombies included)."""
    found: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(name)] = Proc(int(name), int(fields[1]), int(fields[2]), fields[0])
    return found


def alive(proc: Proc) -> bool:
    return proc.state not in ("Z", "X")


def my_children() -> set[int]:
    """The live children of this process."""
    me = os.getpid()
    return {p.pid for p in processes().values() if p.ppid == me and alive(p)}


class Pid:
    """A process known by its pid and start time (a pid is reused once its process is gone)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start = self._start()

    def _start(self) -> str | None:
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return None
        fields = stat[stat.rindex(")") + 2 :].split()
        return None if fields[0] in ("Z", "X") else fields[19]

    @property
    def running(self) -> bool:
        """True until it exits (a zombie has exited)."""
        return self.start is not None and self._start() == self.start

    def kill(self) -> None:
        """SIGKILL it if it is still the process first seen (test cleanup)."""
        if self.running:
            os.kill(self.pid, signal.SIGKILL)


def noted(path: Path, word: str) -> list[str]:
    """What follows `word` on the lines of `path` that start with it."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [line.removeprefix(word).strip() for line in lines if line.startswith(word)]


async def until(condition: Callable[[], object], timeout: float = 30.0) -> None:
    """Return once `condition()` is true (another process makes it so); fail after `timeout`."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def descendants(roots: Iterable[int]) -> set[int]:
    """The live processes below `roots` (by parent pid, now)."""
    table = processes()
    found: set[int] = set()
    todo = list(roots)
    while todo:
        parent = todo.pop()
        for p in table.values():
            if p.ppid == parent and alive(p) and p.pid not in found:
                found.add(p.pid)
                todo.append(p.pid)
    return found


def live_in_groups(groups: Iterable[int]) -> list[Proc]:
    """Live processes in these process groups (a stdio server runs in its own)."""
    wanted = set(groups)
    return [p for p in processes().values() if p.pgrp in wanted and alive(p)]


# ---------------------------------------------------------------- processes the tests run


def run_python(
    *args: str, env: dict[str, str] | None = None, cwd: Path = HERE, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """`python ARGS` in `cwd` (default: this folder, first on its `sys.path`),
    with the sources under test and `env` added to this environment."""
    import taskloom

    sources = str(Path(taskloom.__file__).resolve().parents[1])
    full = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([sources, str(HERE)])}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=full, cwd=cwd
    )
