"""A process killed while its summarizer runs loses nothing; the compaction is
done once, by whoever runs the session next."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from chaos_support import durable, store_name  # noqa: F401 (durable is a fixture)
from compaction_child import agent
from session_child import open_runtime

from pg import pg_schema  # noqa: F401 (fixture)
from taskloom import RunStatus
from taskloom.entries import EntryKind
from taskloom.loop import SUMMARY_PROMPT
from taskloom.models import FunctionModel, ModelRequest, reply

CHILD = Path(__file__).with_name("compaction_child.py")
TRIALS = 3


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_killed_during_the_summarizer_nothing_is_lost_and_compaction_runs_once(
    durable: tuple[str, str],  # noqa: F811
) -> None:
    url, schema = durable
    redone = lost = 0
    for n in range(TRIALS):
        session_id = f"long-{n}"
        # A blocking read below is the point: the test waits for the READY line.
        proc = subprocess.Popen(  # noqa: ASYNC220
            [sys.executable, str(CHILD), url, schema, session_id],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # blocks until the summarizer is running
            assert line.startswith("READY summarizing"), line
        finally:
            proc.kill()
            proc.wait(timeout=10)
        summaries = 0

        def answer(request: ModelRequest) -> object:
            nonlocal summaries
            if request.system == SUMMARY_PROMPT:
                summaries += 1
                return reply("summary of the pages")
            return reply("all read")

        async with open_runtime(url, schema) as runtime:
            session = await runtime.open_session(session_id, agent(FunctionModel(answer)))
            before = [r for m in await session.transcript() for r in m.results]
            result = await session.run("go on")
            assert result.status is RunStatus.COMPLETED
            after = [r for m in await session.transcript() for r in m.results]
            kinds = [e.kind for e in await session.entries()]
        lost += len(before) == 0 or after[: len(before)] != before
        redone += kinds.count(EntryKind.COMPACTION) != 1 or summaries != 1
    print(
        f"{store_name(url)} kill during the summarizer: {TRIALS} trials, "
        f"lost {lost}, compactions not once {redone}"
    )
    assert (lost, redone) == (0, 0)
