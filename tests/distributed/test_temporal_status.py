"""`taskloom queue status --temporal`: a real dev server, a real worker process.

It counts the queue's workflows by kind and status (a completed run, a
schedule's firings) and names the worker polling the task queue; on a task
queue nobody polls it shows zeros and no worker; an unreachable server is
one error line and a hint, exit code 2.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from queue_support import Workers
from test_temporal_queue import (  # noqa: F401 (fixtures)
    effects,
    env,
    host,
    task_queue,
    workers,
)

from pg import pg_schema  # noqa: F401 (fixture)
from taskloom import RunStatus, Runtime
from taskloom.distributed import TemporalQueue
from temporal_server import temporal_server  # noqa: F401 (fixture)

pytestmark = [pytest.mark.temporal]


def status_of(
    environ: dict[str, str], queue_name: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "taskloom",
            "queue",
            "status",
            "--temporal",
            environ["TLT_ADDRESS"],
            "--namespace",
            environ["TLT_NAMESPACE"],
            "--task-queue",
            queue_name or environ["TLT_TASK_QUEUE"],
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
    )


def rows_of(shown: str) -> dict[str, dict[str, int]]:
    """The table's counts by kind, then by status column."""
    lines = shown.splitlines()
    header = lines[1].split()[1:]
    return {
        line.split()[0]: dict(zip(header, map(int, line.split()[1:]), strict=True))
        for line in lines[2:5]
    }


async def test_queue_status_counts_the_workflows_and_names_the_worker(
    host: Runtime,  # noqa: F811
    workers: Workers,  # noqa: F811
    env: dict[str, str],  # noqa: F811
) -> None:
    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    worker = workers.start()
    session = await host.create_session(host.agent_named("bot"))
    await session.submit("hello")
    assert (await session.wait(timeout=60)).status is RunStatus.COMPLETED
    beat = await queue.schedule(session.id, every=timedelta(seconds=1), input="beat")
    deadline = time.monotonic() + 60
    while True:  # visibility is eventually consistent: bounded retries
        shown = await asyncio.to_thread(status_of, env)
        assert shown.returncode == 0, shown.stderr
        rows = rows_of(shown.stdout)
        if rows["run"]["completed"] >= 1 and rows["schedule"]["completed"] >= 1:
            break
        assert time.monotonic() < deadline, shown.stdout
        await asyncio.sleep(0.5)
    assert await queue.cancel_schedule(beat.id)
    assert rows["child"] == dict.fromkeys(rows["child"], 0)
    assert rows["run"]["failed"] == 0
    assert f"task queue {env['TLT_TASK_QUEUE']}" in shown.stdout.splitlines()[0]
    assert "workers polling: 1" in shown.stdout
    polled = [line.strip() for line in shown.stdout.splitlines() if line.startswith("  ")]
    assert len(polled) == 1 and polled[0].startswith(f"{worker.pid}@"), shown.stdout
    assert "(workflows, activities)" in polled[0]
    await session.wait(timeout=60)


def test_queue_status_of_an_idle_task_queue_and_of_no_server(
    env: dict[str, str],  # noqa: F811
) -> None:
    shown = status_of(env, queue_name="nobody-polls-this")
    assert shown.returncode == 0, shown.stderr
    assert all(set(counts.values()) == {0} for counts in rows_of(shown.stdout).values())
    assert "workers polling: 0" in shown.stdout
    refused = status_of({**env, "TLT_ADDRESS": "127.0.0.1:1"})
    assert refused.returncode == 2
    assert "cannot be reached" in refused.stderr and "hint:" in refused.stderr
    assert refused.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        ["postgresql://127.0.0.1:1/queue", "--task-queue", "agents"],
        ["postgresql://127.0.0.1:1/queue", "--namespace", "prod"],
        ["--temporal", "127.0.0.1:1", "--schema", "jobs"],
    ],
)
def test_queue_status_refuses_one_engine_s_flags_with_the_other_s_queue(args: list[str]) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "taskloom", "queue", "status", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 2
    assert "does not go with this queue" in shown.stderr and "hint:" in shown.stderr
    assert shown.stdout == ""
