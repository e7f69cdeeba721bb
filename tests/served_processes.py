"""`taskloom a2a serve` and `taskloom mcp serve` as real processes on a
loopback port and a durable store (SQLite or PostgreSQL, from the
`store_url` fixture), serving `served_task_agent:clerk`; and `taskloom
approve` in a process of its own."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import taskloom
from served_task_agent import IN_FLIGHT

TESTS = Path(__file__).resolve().parent
SOURCES = Path(taskloom.__file__).resolve().parents[1]


def store_env(schema: str) -> dict[str, str]:
    """The environment of a process that opens the `store_url` pair's store
    by its URL alone: PostgreSQL's private schema through `search_path`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SOURCES), str(TESTS)]))
    if schema != "-":
        env["PGOPTIONS"] = f"-c search_path={schema}"
    return env


class ServedProcess:
    """One `taskloom KIND serve served_task_agent:clerk --http 127.0.0.1:0
    ARGS` (with `env` added to its environment) on the store at `url`
    (schema `schema`); its model waits for `gate`."""

    def __init__(
        self,
        kind: str,
        url: str,
        schema: str,
        folder: Path,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self.store = url
        self.schema = schema
        self.gate = folder / "gate"
        self.args = list(args)
        self.env = dict(env or {})
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self._early: list[str] = []

    def start(self) -> str:
        """Start the server; returns its URL once it accepts calls."""
        command = [sys.executable, "-m", "taskloom", self.kind, "serve"]
        command += ["served_task_agent:clerk", "--http", "127.0.0.1:0", "--store", self.store]
        self.process = subprocess.Popen(
            [*command, *self.args],
            stdout=subprocess.PIPE,
            text=True,
            env={**store_env(self.schema), "TASKLOOM_TEST_GATE": str(self.gate), **self.env},
            start_new_session=True,
        )
        # A task the server runs on at its start may print before it serves.
        self._early = []
        while (line := self._line()).startswith(IN_FLIGHT):
            self._early.append(line)
        assert f"serving agent 'clerk' over {self.kind.upper()} at" in line, line
        self.url = line.split()[-1] if self.kind == "mcp" else line.split(" at ")[1].split()[0]
        return self.url

    def _line(self) -> str:
        assert self.process is not None and self.process.stdout is not None
        return self.process.stdout.readline()

    async def said(self, text: str, timeout: float = 30) -> None:
        """Wait until the server prints a line starting with `text`."""
        if any(line.startswith(text) for line in self._early):
            self._early = [line for line in self._early if not line.startswith(text)]
            return
        async with asyncio.timeout(timeout):
            while not (line := await asyncio.to_thread(self._line)).startswith(text):
                assert line, f"the server ended before saying {text!r}"

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to the server (the pid this started) and wait for it to end."""
        process = self.process
        if process is None:
            return
        self.process = None
        os.kill(process.pid, sig)
        try:
            process.wait(15)
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(15)
            assert process.stdout is not None
            process.stdout.close()

    def stop(self) -> None:
        self.signal(signal.SIGKILL)


def peak_rss_mib(pid: int) -> float:
    """The most memory process `pid` has held resident so far (VmHWM), in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    assert found, status
    return int(found.group(1)) / 1024


def approve_from_the_cli(store: str, schema: str, session_id: str, call_id: str) -> str:
    """`taskloom approve SESSION CALL --store URL` in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "taskloom", "approve", session_id, call_id, "--store", store],
        capture_output=True,
        text=True,
        env={**store_env(schema), "COLUMNS": "200"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
