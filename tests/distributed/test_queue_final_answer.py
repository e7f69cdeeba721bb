"""A worker SIGKILLed between a run's final answer and its end: the redelivered
job ends the run from the log, without asking the model again."""

from __future__ import annotations

from pathlib import Path

import pytest
from queue_support import killable, marks, messages_of

from pg import PG_DSN, requires_postgres
from taskloom import RunStatus
from taskloom.distributed import WorkQueue
from taskloom.entries import RunFinishedEntry

pytestmark = [requires_postgres, pytest.mark.slow]


async def test_a_job_killed_after_the_final_answer_is_ended_without_a_second_request(
    pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects, pool, host = killable(PG_DSN, pg_schema, tmp_path, monkeypatch)
    try:
        first = pool.start(concurrency=1, TLQ_HANG_AT_END="1")
        session = await host.create_session(host.agent_named("answerer"))
        await session.submit("answer me")
        # The answer is stored; the worker hangs before the run's end.
        first.expect(f"READY end {session.id}")
        first.kill()
        pool.start(concurrency=1)
        queue = host.queue
        assert isinstance(queue, WorkQueue)
        await queue.wait_idle(session.id, 60)
        entries = await host.store.load(session.id)
        asked = [line for line in marks(effects) if line.startswith("ASKED ")]
        answers = [m.text for m in messages_of(entries) if m.role == "assistant"]
        ends = [e.payload for e in entries if isinstance(e.payload, RunFinishedEntry)]
        print(f"model requests {len(asked)}, final answers {len(answers)}, run ends {len(ends)}")
        assert asked == [f"ASKED {first.pid}"]  # the model was asked once, by the killed worker
        assert answers == [f"answered by {first.pid}"]
        assert [(e.status, e.text, e.model_requests) for e in ends] == [
            (RunStatus.COMPLETED, f"answered by {first.pid}", 0)
        ]
        result = await session.wait(10)
        assert result.status is RunStatus.COMPLETED and result.text == answers[0]
    finally:
        pool.close()
        await host.close()
