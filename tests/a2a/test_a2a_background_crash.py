"""A parent SIGKILLed while its remote A2A task runs: the session, resumed in
another process, gets the remote agent's answer exactly once."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from remote_background import Finished, deliveries, parent
from sdk_agent import serving_process

from pg import open_durable, pg_schema, store_url  # noqa: F401 (fixtures)
from taskloom import Runtime
from taskloom.delegation import child_status

pytest.importorskip("a2a")
HERE = Path(__file__).resolve().parent
TRIALS = 4


def _start_parent(
    store: tuple[str, str], session_id: str, url: str, task: str, poll: str = "0.05", hold: str = ""
) -> tuple[subprocess.Popen[str], str]:
    """The parent process, once its follower follows; and the child session's id.
    `hold` is its `HOLD` (see `remote_parent_child`)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent)]), HOLD=hold)
    script = str(HERE / "remote_parent_child.py")
    proc = subprocess.Popen(
        [sys.executable, script, *store, session_id, url, task, poll],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        raise AssertionError(f"the parent process did not get ready: {line!r}")
    return proc, line.split()[1]


async def _until_ended(runtime: Runtime, child: str, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not (await child_status(runtime, child)).is_terminal:
            await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_a_parent_killed_while_its_remote_task_runs_gets_the_answer_once_after_resuming(
    store_url: tuple[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    counts: list[int] = []
    with serving_process() as (url, _):
        for trial in range(TRIALS):
            gate = tmp_path / f"gate-{trial}"
            session_id = f"parent-{trial}"
            proc, child = _start_parent(store_url, session_id, url, f"gate {gate} bonjour {trial}")
            try:
                when = trial % 3
                if when == 0:
                    # The answer is ready while its follower lives: it may or may
                    # not have delivered it, or marked the child ended, when killed.
                    gate.touch()
                    await asyncio.sleep(random.uniform(0.0, 0.3))
            finally:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            if when == 1:
                gate.touch()  # the answer is ready while nobody follows
            async with Runtime(store=open_durable(*store_url)) as runtime:
                Finished(runtime)
                session = await runtime.open_session(session_id, parent(url))
                await session.run("anything?")  # follows the remote task again
                if when == 2:
                    gate.touch()  # the answer comes while the new process follows
                await _until_ended(runtime, child)
                await session.run("news?")
                await session.run("again?")
                delivered = deliveries(await session.entries(), child)
            counts.append(len(delivered))
            assert all(f"answered:\n  bonjour {trial}" in text for text in delivered)
    print(f"deliveries of the remote answer per trial: {counts}")
    assert counts == [1] * TRIALS


@pytest.mark.slow
async def test_a_resumed_follow_hears_of_the_remote_end_within_a_second(
    store_url: tuple[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    """With the agent's own `poll_interval` (2 s): the resumed follow listens
    to the task's stream, so it does not wait for its next read."""
    delays: list[float] = []
    with serving_process() as (url, _):
        for trial in range(3):
            gate = tmp_path / f"gate-{trial}"
            session_id = f"parent-{trial}"
            task = f"gate {gate} bonjour {trial}"
            proc, child = _start_parent(store_url, session_id, url, task, "default")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            async with Runtime(store=open_durable(*store_url)) as runtime:
                finished = Finished(runtime)
                session = await runtime.open_session(session_id, parent(url, poll_interval=None))
                await session.run("anything?")  # follows the remote task again
                assert runtime.background.task_for(session_id, child) is not None
                await asyncio.sleep(0.3)  # the follow reads the task, and listens
                loop = asyncio.get_running_loop()
                opened = loop.time()
                gate.touch()
                await finished.count(1)
                delays.append(loop.time() - opened)
                await session.run("news?")
                delivered = deliveries(await session.entries(), child)
            assert len(delivered) == 1
            assert f"answered:\n  bonjour {trial}" in delivered[0]
    print(
        "seconds from the remote task's end to its answer in the inbox: "
        + ", ".join(f"{d:.2f}" for d in delays)
    )
    assert max(delays) < 1.0
