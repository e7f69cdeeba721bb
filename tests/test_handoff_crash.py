"""A delegation handed to the background survives its process: SIGKILL while
the child runs, and the parent's next run (in another process) takes the
child up from its log; its answer arrives once. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Runtime
from taskloom.delegation import ChildStatus, child_status
from taskloom.entries import MessageEntry, SubagentResult
from taskloom.models import FunctionModel, ModelRequest, reply

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import handoff_child  # noqa: E402  (its agent, built here with a child that answers)

TRIALS = 3


def answers(request: ModelRequest) -> Any:
    return reply("forty-two")


async def test_a_handed_off_child_is_taken_up_after_a_sigkill(
    store_url: tuple[str, str],
) -> None:
    url, schema = store_url
    for trial in range(TRIALS):
        runtime = Runtime(store=open_durable(url, schema))
        agent = handoff_child.build(FunctionModel(answers, name="deep"))
        session = await runtime.create_session(agent)
        proc = subprocess.Popen(  # noqa: ASYNC220 (started once, read on a thread)
            [sys.executable, str(HERE / "handoff_child.py"), url, schema, session.id],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.to_thread(proc.stdout.readline)
            assert line.startswith("HANDED "), proc.stderr.read() if proc.stderr else line
            child_id = line.split()[1]
            assert "waiting for the helper" in line
        finally:
            proc.kill()
            proc.wait(timeout=10)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        assert await child_status(runtime, child_id) in (
            ChildStatus.RUNNING,  # its dead holder's lease has not lapsed
            ChildStatus.INTERRUPTED,
        )
        reopened = await runtime.open_session(session.id, agent)
        # The first boundary of this run takes the child up; its report lands
        # in the inbox (maybe after this run ended), and the next run reads it.
        await reopened.run("any news?")
        async with asyncio.timeout(20):
            while (await child_status(runtime, child_id)) is not ChildStatus.DONE:
                await asyncio.sleep(0.02)
            while not await runtime.background.inbox.pending(session.id):
                if any("forty-two" in m.text for m in await reopened.transcript()):
                    break
                await asyncio.sleep(0.02)
        final = await reopened.run("and now?")
        assert final.text == "the helper said: forty-two"
        entries = await reopened.entries()
        delivered = [
            i
            for e in entries
            if isinstance(e.payload, MessageEntry)
            for i in e.payload.delivered_ids
            if child_id in i
        ]
        ends = [
            e for e in await runtime.store.load(child_id) if isinstance(e.payload, SubagentResult)
        ]
        print(
            f"trial {trial + 1}: child ended {len(ends)}x, its report delivered {len(delivered)}x"
        )
        assert len(ends) == 1 and len(delivered) == 1
        await runtime.close()
