"""A worker SIGKILLed around the one statement that writes a run's final answer
with its end (`append_ending`): before it is sent, the answer is lost and the
redelivered job asks the model again; once it committed, the run has ended and
the redelivered job asks nothing. Either way the log holds one end, COMPLETED,
and one answer, and `wait` gives what the log holds."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
from queue_support import killable, marks, messages_of, until

from pg import PG_DSN, requires_postgres
from taskloom import RunStatus, Runtime
from taskloom.distributed import WorkQueue
from taskloom.entries import Entry, MessageEntry, RunFinishedEntry

pytestmark = [requires_postgres, pytest.mark.slow]

TRIALS = 3


def _ends(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if isinstance(e.payload, RunFinishedEntry)]


def _check_one_end(entries: list[Entry]) -> RunFinishedEntry:
    """The log's one run end (COMPLETED), with nothing of its run, and no
    answer, after it."""
    ends = _ends(entries)
    assert len(ends) == 1, [(e.position, e.kind) for e in entries]
    end = ends[0]
    assert isinstance(end.payload, RunFinishedEntry)
    assert end.payload.status is RunStatus.COMPLETED
    after = [e for e in entries if e.position > end.position]
    assert [e for e in after if e.run_id == end.run_id] == []
    assert [m for m in messages_of(after) if m.role == "assistant"] == []
    return end.payload


@pytest.mark.parametrize("where", ["before", "after"])
async def test_a_job_killed_around_the_statement_writing_answer_and_end(
    where: str, pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects, pool, host = killable(PG_DSN, pg_schema, tmp_path, monkeypatch)
    counts = {"trials": 0, "asked": 0, "answers": 0, "ends": 0}
    try:
        queue = host.queue
        assert isinstance(queue, WorkQueue)
        for _ in range(TRIALS):
            first = pool.start(concurrency=1, TLQ_HANG_ENDING=where)
            session = await host.create_session(host.agent_named("answerer"))
            await session.submit("answer me")
            # Paused inside the store's `append_ending`: the answer and the
            # run's end go in one statement (the new path is the one taken).
            if where == "before":
                first.expect(f"READY ending {session.id} message,run_finished")
            else:
                first.expect(f"READY ended {session.id} message,run_finished True")
            first.kill()
            second = pool.start(concurrency=1)
            await queue.wait_idle(session.id, 60)
            entries = await host.store.load(session.id)
            asked = [line for line in marks(effects) if line.startswith("ASKED ")]
            answers = [m.text for m in messages_of(entries) if m.role == "assistant"]
            end = _check_one_end(entries)
            if where == "before":
                # Nothing was written: the answer died with the worker, and
                # the second worker asked again.
                assert asked == [f"ASKED {first.pid}", f"ASKED {second.pid}"]
                assert answers == [f"answered by {second.pid}"]
            else:
                # The run ended with the answer: the second worker asks nothing.
                assert asked == [f"ASKED {first.pid}"]
                assert answers == [f"answered by {first.pid}"]
            assert end.text == answers[0]
            result = await session.wait(10)
            assert (result.status, result.text) == (end.status, end.text)
            counts["trials"] += 1
            counts["asked"] += len(asked)
            counts["answers"] += len(answers)
            counts["ends"] += len(_ends(entries))
            second.close()
            effects.write_text("")
        print(f"killed {where} append_ending: {counts}")
    finally:
        pool.close()
        await host.close()


async def _parent_answered(host: Runtime, parent_id: str) -> bool:
    entries = await host.store.load(parent_id)
    return any(
        m.role == "assistant" and m.text.startswith("report received") for m in messages_of(entries)
    )


@pytest.mark.parametrize("where", ["before", "after"])
async def test_a_background_child_killed_around_its_ending_reports_once(
    where: str, pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, pool, host = killable(PG_DSN, pg_schema, tmp_path, monkeypatch, wake=True)
    counts = {"trials": 0, "reports": 0, "child_results": 0}
    try:
        for _ in range(TRIALS):
            first = pool.start(concurrency=2, TLQ_HANG_ENDING=where, TLQ_HANG_ENDING_OF="child")
            parent = await host.create_session(host.agent_named("lead"))
            await parent.submit("get help")
            line = first.expect("READY ended " if where == "after" else "READY ending ")
            child_id, kinds = line.split()[2:4]
            assert kinds.split(",")[:2] == ["message", "run_finished"], line
            if where == "after":
                assert line.endswith(" True"), line
            first.kill()
            second = pool.start(concurrency=2)
            await until(partial(_parent_answered, host, parent.id))
            result = await parent.wait(30)
            assert result.status is RunStatus.COMPLETED
            assert result.text.startswith("report received")
            children = await host.store.list(parent_id=parent.id)
            assert [c.id for c in children] == [child_id]
            child_entries = await host.store.load(child_id)
            end = _check_one_end(child_entries)
            answers = [m.text for m in messages_of(child_entries) if m.role == "assistant"]
            answers = [text for text in answers if text]
            # Before: the answer died with the worker and the second one gave
            # it; after: the killed worker's answer ended the child.
            by = second.pid if where == "before" else first.pid
            assert len(answers) == 1 and answers[0].startswith(f"done by {by}:"), answers
            assert end.text == answers[0]
            results = [e.kind for e in child_entries].count("subagent_result")
            assert results == 1
            parent_entries = await host.store.load(parent.id)
            # The child's report, as delivered to the parent's model (it
            # rides on the assistant entry that answered it).
            delivered = [
                e.payload.delivered_text
                for e in parent_entries
                if isinstance(e.payload, MessageEntry) and e.payload.delivered_text
            ]
            reports = sum(text.count("finished. Its report") for text in delivered)
            assert reports == 1, delivered
            counts["trials"] += 1
            counts["reports"] += reports
            counts["child_results"] += results
            second.close()
        print(f"child killed {where} append_ending: {counts}")
    finally:
        pool.close()
        await host.close()
