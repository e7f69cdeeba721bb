"""Both queue engines behind one object, for tests written once against the user verbs.

The `engine` fixture yields an `Engine`: procrastinate's `WorkQueue` on
PostgreSQL, or `TemporalQueue` on the test run's real dev server with a
SQLite or a PostgreSQL store (procrastinate keeps its jobs in the store's
PostgreSQL database, so it has no SQLite case). An `Engine` starts
`taskloom worker` processes (`start`), builds the test's own host runtime
(`host`), runs the CLI with only the store and the app (`cli`), and closes
everything at the end. What truly differs between the engines is said once,
as a capability on the object, never by a test skipping::

    from engines import Engine, engine  # noqa: F401 (fixture)
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import engines_app
import pytest
from queue_support import HERE, SRC, WorkerProc, Workers

from pg import PG_DSN, requires_postgres
from taskloom import Runtime

__all__ = ["CASES", "Engine", "engine", "engine_case"]

CASES = [
    pytest.param(
        ("procrastinate", "postgres"), id="procrastinate-postgres", marks=requires_postgres
    ),
    pytest.param(("temporal", "sqlite"), id="temporal-sqlite", marks=pytest.mark.temporal),
    pytest.param(
        ("temporal", "postgres"),
        id="temporal-postgres",
        marks=[requires_postgres, pytest.mark.temporal],
    ),
]
"""Every (engine, store) pair an engine supports."""


@dataclass
class Engine:
    """One engine on one store: its workers' environment, and what it does differently.

    `job_names_session`: `submit` returns an id derived from the session
    (Temporal's workflow id, `taskloom-session-<id>`), rather than a job id
    of the queue's own (procrastinate). How a worker names itself in the
    runs it starts (`RunStartedEntry.by`) differs too: see `names_worker`."""

    name: str
    store: str
    env: dict[str, str]
    job_names_session: bool
    workers: Workers
    hosts: list[Runtime] = field(default_factory=list)

    def start(self, *, concurrency: int = 4, **env: str) -> WorkerProc:
        """A `taskloom worker` process of this engine, ready (its env extended by `env`)."""
        return self.workers.start(concurrency=concurrency, **env)

    def host(self) -> Runtime:
        """A runtime of the test's own process on the workers' store and queue
        (woken by notices, as a host that dispatches children is); closed at the end."""
        runtime = engines_app.build(self.env, wake=True)
        self.hosts.append(runtime)
        return runtime

    def job_id(self, session_id: str) -> str | None:
        """What `submit` returns for the session, where the engine derives it."""
        return f"taskloom-session-{session_id}" if self.job_names_session else None

    def names_worker(self, by: str, worker: WorkerProc) -> bool:
        """Whether a run's `by` names `worker`: procrastinate writes `worker N,
        job M (host, pid P)`, Temporal the worker's identity `P@host`."""
        if self.name == "temporal":
            return f"{worker.pid}@" in by
        return f", pid {worker.pid})" in by

    async def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`python -m taskloom ARGS --app engines_app:make_runtime` in another
        process that has only the store and the app (never this process's objects)."""
        command = [sys.executable, "-m", "taskloom", *args, "--app", "engines_app:make_runtime"]
        return await asyncio.to_thread(
            subprocess.run,
            command,
            env={**self.env, "TERM": "dumb"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    async def close(self) -> None:
        for runtime in self.hosts:
            await runtime.close()
        self.workers.close()


def _worker_args(env: dict[str, str]) -> tuple[str, ...]:
    args: tuple[str, ...] = ("--app", "engines_app:make_runtime")
    if env["TLE_ENGINE"] == "temporal":
        temporal = ("--temporal", env["TLE_ADDRESS"], "--namespace", env["TLE_NAMESPACE"])
        args = (*temporal, "--task-queue", env["TLE_TASK_QUEUE"], *args)
    return args


@pytest.fixture(params=CASES)
def engine_case(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Engine:
    """An engine on a store (every case of `CASES`), before anything started.
    Synchronous: the server and schema fixtures it asks for start their own loops."""
    name, store = request.param
    path = [str(HERE), str(SRC), os.environ.get("PYTHONPATH", "")]
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "PYTHONUNBUFFERED": "1",
        "TLE_ENGINE": name,
        "TLQ_EFFECTS": str(tmp_path / "effects.txt"),
    }
    if store == "sqlite":
        env |= {"TLE_STORE": f"sqlite:///{tmp_path / 'taskloom.db'}", "TLE_SCHEMA": "-"}
    else:
        env |= {"TLE_STORE": PG_DSN, "TLE_SCHEMA": request.getfixturevalue("pg_schema")}
    if name == "temporal":
        server = request.getfixturevalue("temporal_server")
        env |= {
            "TLE_ADDRESS": server.address,
            "TLE_NAMESPACE": server.namespace,
            # A task queue of this test's own: tests on one server never take each other's work.
            "TLE_TASK_QUEUE": f"tq-{uuid.uuid4().hex[:8]}",
        }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    full = {**os.environ, **env}
    return Engine(
        name=name,
        store=store,
        env=full,
        job_names_session=name == "temporal",
        workers=Workers(full, _worker_args(full)),
    )


@pytest.fixture
async def engine(engine_case: Engine) -> AsyncIterator[Engine]:
    """An engine on a store (every case of `CASES`), with its workers and hosts
    closed at the end. Its env is this process's too, for the host's tools."""
    try:
        yield engine_case
    finally:
        await engine_case.close()
