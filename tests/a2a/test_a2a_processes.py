"""`taskloom a2a serve` in real processes: a task outlives its server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from a2a.types import GetTaskRequest, TaskState
from a2a_support import client_for, user_message

pytest.importorskip("a2a")
HERE = Path(__file__).resolve().parent


@contextmanager
def a2a_server(store: str, agent: str, token: str) -> Iterator[str]:
    """`taskloom a2a serve` on a free loopback port; yields its URL, and
    kills the process it started (by pid) when done."""
    env = dict(os.environ, PYTHONPATH=str(HERE), A2A_TEST_TOKEN=token)
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "taskloom", "a2a", "serve", agent),
            *("--http", "127.0.0.1:0", "--store", store, "--token-env", "A2A_TEST_TOKEN"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"at (http://\S+) \(with a bearer token\)", line)
        assert found, line
        yield found.group(1)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.mark.slow
async def test_a_new_server_on_the_same_store_answers_for_an_old_task(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'tasks.db'}"
    with a2a_server(store, "served_agents:payer", "tok") as url:
        async with client_for(url, token="tok") as client:
            responses = [r async for r in client.send_message(user_message("pay"))]
    parked = [r.task for r in responses if r.HasField("task")][-1]
    assert parked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    # The first server is dead (SIGKILL): only the store knows the task now.
    with a2a_server(store, "served_agents:payer", "tok") as url:
        async with client_for(url, token="tok") as client:
            got = await client.get_task(GetTaskRequest(id=parked.id))
            assert got.context_id == parked.context_id
            assert got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            reply = user_message("approve", task_id=parked.id, context_id=parked.context_id)
            done = [
                r.task for r in [r async for r in client.send_message(reply)] if r.HasField("task")
            ]
            got = await client.get_task(GetTaskRequest(id=parked.id))
    assert done[-1].status.state == TaskState.TASK_STATE_COMPLETED
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert got.artifacts[0].parts[0].text == "done: paid 600"
