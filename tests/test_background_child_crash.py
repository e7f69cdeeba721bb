"""A background child (spawned to a dispatcher, mode "background") whose
process is SIGKILLed is taken up at once by its parent's next run in a new
process of the same machine (its holder is dead: no wait for the lease),
run on by the one follower, and reported once. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Runtime
from taskloom.backends import session_lease_key
from taskloom.background import FOLLOW_LEASE
from taskloom.delegation import ChildStatus, child_status
from taskloom.entries import MessageEntry, SubagentResult
from taskloom.models import FunctionModel, ModelRequest, reply

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import spawned_child  # noqa: E402  (its agent, built here with a child that answers)

TRIALS = 3


def answers(request: ModelRequest) -> Any:
    return reply("forty-two")


async def test_a_killed_background_child_is_taken_up_at_once_and_reports_once(
    store_url: tuple[str, str],
) -> None:
    url, schema = store_url
    for trial in range(TRIALS):
        model = FunctionModel(answers, name="deep")
        # The child is rebuilt from this runtime's registries (its spec names "deep").
        runtime = Runtime(store=open_durable(url, schema), models=[model])
        agent = spawned_child.build(model)
        session = await runtime.create_session(agent)
        proc = subprocess.Popen(  # noqa: ASYNC220 (started once, read on a thread)
            [sys.executable, str(HERE / "spawned_child.py"), url, schema, session.id],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.to_thread(proc.stdout.readline)
            assert line.startswith("SPAWNED "), proc.stderr.read() if proc.stderr else line
            child_id = line.split()[1]
        finally:
            proc.kill()
            proc.wait(timeout=10)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        # Its dead holder's lease has not lapsed: only the take-over rule frees
        # it. A holder known dead runs nothing: the child reads as interrupted.
        assert await runtime.store.leases.current(session_lease_key(child_id)) is not None
        assert await child_status(runtime, child_id) is ChildStatus.INTERRUPTED
        reopened = await runtime.open_session(session.id, agent)
        started = time.monotonic()
        await reopened.run("any news?")
        async with asyncio.timeout(FOLLOW_LEASE / 3):
            while (await child_status(runtime, child_id)) is not ChildStatus.DONE:
                await asyncio.sleep(0.02)
        taken = time.monotonic() - started
        async with asyncio.timeout(10):
            while not await runtime.background.inbox.pending(session.id):
                await asyncio.sleep(0.02)
        final = await reopened.run("and now?")
        assert final.text == "the worker said: forty-two"
        delivered = [
            i
            for e in await reopened.entries()
            if isinstance(e.payload, MessageEntry)
            for i in e.payload.delivered_ids
            if child_id in i
        ]
        ends = [
            e for e in await runtime.store.load(child_id) if isinstance(e.payload, SubagentResult)
        ]
        print(
            f"trial {trial + 1}: child done {taken:.2f} s after the next run started; "
            f"ended {len(ends)}x, reported {len(delivered)}x"
        )
        assert taken < 3.0
        assert len(ends) == 1 and len(delivered) == 1
        await runtime.close()
