"""A tool round on PostgreSQL takes two round trips: the assistant message
with its fence, then the results with the next boundary's inbox read.

Counted, not timed: the round trips psycopg makes (`benchmarks/_statements.py`
counts them) over the steady rounds of one run. The pool's connection checks
("(empty)") are left out of the count: they belong to the pool, not the round.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (fixture)
from taskloom import Agent, RunOptions, Runtime, ToolContext, ToolEffect, Usage, tool
from taskloom.backends import (
    BackgroundActivity,
    BackgroundNotice,
    PostgresBackend,
    session_lease_key,
)
from taskloom.background import Lifecycle
from taskloom.delegation import ChildSpec, ChildStatus, ChildWorker
from taskloom.events import WorkFinished
from taskloom.models import FunctionModel, ModelRequest, reply

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres, requires_postgres]

WARM = 5
ROUNDS = 20


def _counter() -> ModuleType:
    # Loaded once: it patches psycopg once, towards its own module's counters.
    if "taskloom_bench_statements" in sys.modules:
        return sys.modules["taskloom_bench_statements"]
    path = Path(__file__).parents[1] / "benchmarks" / "_statements.py"
    spec = importlib.util.spec_from_file_location("taskloom_bench_statements", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


@tool(effect=ToolEffect.READ_ONLY)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def _rounds(store: Any, on_request: Any) -> list[str]:
    """Run WARM + ROUNDS tool rounds and a final one; `on_request(n)` at the
    n-th model request. The texts the model was shown, by request."""
    usage = Usage(10, 5)
    seen: list[str] = []

    def answer(request: ModelRequest) -> Any:
        seen.append(repr(request.messages[-1]))
        n = len(seen)
        on_request(n)
        if n > WARM + ROUNDS:
            return reply("done", usage=usage)
        return reply(tool_calls=[("add", {"a": n, "b": 1}, f"c{n}")], usage=usage)

    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(Agent("rt", FunctionModel(answer), tools=[add]))
        await session.run("go", options=RunOptions(max_rounds=None))
    return seen


async def test_a_tool_round_on_postgresql_is_two_round_trips(
    pg_schema: str,  # noqa: F811
) -> None:
    # A boundary uses the inbox read that came with the results only when it
    # follows them closely (within a few tens of milliseconds); a round the
    # machine's load held up longer reads the inbox again, so a few rounds
    # of a loaded machine may take a third round trip, never most of them.
    counting = _counter().count_statements()
    found: list[Any] = []

    def at(n: int) -> None:
        if n == WARM + 1:
            found.append(counting.__enter__())
        elif n == WARM + ROUNDS + 1:
            counting.__exit__(None, None, None)

    await _rounds(PostgresBackend(PG_DSN, schema=pg_schema).store, at)
    sent = found[0]
    kinds = dict(sent.by_kind)
    # Two statements a round: the fenced appends, the second reading the inbox too.
    fenced = sum(n for kind, n in kinds.items() if kind.startswith("WITH fence"))
    assert fenced == 2 * ROUNDS, kinds
    others = sent.total - sent.checks - fenced
    assert others <= ROUNDS // 4, kinds  # a separate inbox read every round was 3 a round
    assert 2 * ROUNDS <= sent.round_trips - sent.checks <= 2 * ROUNDS + ROUNDS // 4, kinds


async def test_a_notice_read_with_the_results_reaches_the_next_request(
    pg_schema: str,  # noqa: F811
) -> None:
    # The notice lands while a tool runs: the results' append reads it, the
    # next request carries it, and it is acknowledged only after that.
    backend = PostgresBackend(PG_DSN, schema=pg_schema)
    pushed: list[str] = []
    usage = Usage(10, 5)
    shown: list[str] = []

    @tool(effect=ToolEffect.READ_ONLY)
    async def report(ctx: ToolContext) -> str:
        """Report a finished job to the session's inbox."""
        notice = BackgroundNotice("job-1:end", "job-1", "job", "the job is done", "done")
        assert await backend.inbox.push(ctx.session_id, notice)
        pushed.append(notice.id)
        # Not acknowledged yet: the model has not seen it.
        assert [n.id for n in await backend.inbox.pending(ctx.session_id)] == ["job-1:end"]
        return "reported"

    def answer(request: ModelRequest) -> Any:
        shown.append(repr(request.messages))
        if len(shown) == 1:
            return reply(tool_calls=[("report", {}, "c1")], usage=usage)
        return reply("done", usage=usage)

    async with Runtime(store=backend.store) as runtime:
        session = await runtime.create_session(
            Agent("notices", FunctionModel(answer), tools=[report])
        )
        await session.run("go")
        assert pushed == ["job-1:end"]
        assert "the job is done" in shown[1]
        assert await backend.inbox.pending(session.id) == []


async def test_a_finish_on_postgresql_pushes_and_unregisters_in_one_round_trip(
    pg_schema: str,  # noqa: F811
) -> None:
    # A background child's report: its notice pushed and its registration
    # removed together (one statement, both or neither), announced once.
    backend = PostgresBackend(PG_DSN, schema=pg_schema)
    seen: list[WorkFinished] = []
    life = Lifecycle(backend.registry, backend.inbox, seen.append)
    work = BackgroundActivity("a1", "subagent", "child", 1_700_000_000.0)
    try:
        assert await life.begin("s", work, lambda: None)
        with _counter().count_statements() as sent:
            assert await life.finish("s", BackgroundNotice("a1:end", "a1", "subagent", "ok"))
        assert sent.total - sent.checks == 1, dict(sent.by_kind)
        assert sent.round_trips - sent.checks == 1, dict(sent.by_kind)
        assert [e.activity_id for e in seen] == ["a1"]
        assert [n.id for n in await backend.inbox.pending("s")] == ["a1:end"]
        assert await backend.registry.list("s") == []
        # A repeated finish writes and announces nothing more.
        assert await life.begin("s", work, lambda: None)
        assert not await life.finish("s", BackgroundNotice("a1:end", "a1", "subagent", "again"))
        assert [n.text for n in await backend.inbox.pending("s")] == ["ok"]
        assert await backend.registry.list("s") == []
        assert len(seen) == 1
    finally:
        await backend.close()


async def _child_run(
    backend: PostgresBackend, report: Any = None
) -> tuple[Any, Any, ChildSpec, Any]:
    """A registered background child of a parent, run to its end by a
    `ChildWorker`, its statements counted (after a first child, uncounted,
    made every table); `report`, if given, replaces the inbox's
    `push_removing_releasing`. (runtime, counted, spec, status or error)."""
    model = FunctionModel(lambda request: reply("done", usage=Usage(10, 5)), name="child")
    runtime = Runtime(store=backend.store, models=[model])
    parent = await runtime.create_session(Agent("lead", model))
    for n in range(2):
        child = await runtime.create_session(Agent("child", "function:child"), parent_id=parent.id)
        spec = ChildSpec(child.id, parent.id, f"c{n}", "go", model="function:child")
        work = BackgroundActivity(child.id, "subagent", "c", 1_700_000_000.0)
        assert await backend.registry.add(parent.id, work, 60.0, None)
        if n == 0:
            assert await ChildWorker(runtime, worker_id="w").run(spec) is ChildStatus.DONE
            await backend.inbox.ack(
                parent.id, [n.id for n in await backend.inbox.pending(parent.id)]
            )
    if report is not None:
        backend.inbox.push_removing_releasing = report  # type: ignore[method-assign]
    with _counter().count_statements() as sent:
        try:
            status = await ChildWorker(runtime, worker_id="w").run(spec)
        except RuntimeError as exc:
            status = exc
    return runtime, sent, spec, status


async def test_a_childs_report_gives_its_lease_up_in_the_same_round_trip(
    pg_schema: str,  # noqa: F811
) -> None:
    # A background child on PostgreSQL: its lease taken, its log read, two
    # fenced appends (its start with the user turn, also reading its inbox
    # and what it has running for its first boundary; its answer with the
    # run's end and its terminal entry), then its report written with its
    # lease given up: one statement, all or nothing.
    backend = PostgresBackend(PG_DSN, schema=pg_schema)
    try:
        runtime, sent, spec, status = await _child_run(backend)
        assert status is ChildStatus.DONE
        kinds = dict(sent.by_kind)
        assert sent.total - sent.checks == 5, kinds
        assert sent.round_trips - sent.checks == 5, kinds
        assert not [k for k in kinds if "SET holder = NULL" in k or "leases SET" in k], kinds
        # Given up: another holder takes the lease at once, a generation on.
        key = session_lease_key(spec.child_session_id)
        assert await backend.store.leases.current(key) is None
        taken = await backend.store.leases.acquire(key, "other", 30.0)
        assert taken is not None and taken.generation == 2
        # Reported, and unregistered.
        (notice,) = await backend.inbox.pending(spec.parent_session_id)
        assert notice.activity_id == spec.child_session_id and "finished" in notice.text
        assert await backend.registry.list(spec.parent_session_id) == []
        await runtime.close()
    finally:
        await backend.close()


async def test_a_report_that_fails_leaves_the_lease_to_be_released_as_usual(
    pg_schema: str,  # noqa: F811
) -> None:
    backend = PostgresBackend(PG_DSN, schema=pg_schema)

    async def failing(*args: Any) -> bool:
        raise RuntimeError("the inbox is gone")

    try:
        runtime, _sent, spec, status = await _child_run(backend, failing)
        assert isinstance(status, RuntimeError)
        key = session_lease_key(spec.child_session_id)
        assert await backend.store.leases.current(key) is None  # released by its hold
        assert await backend.inbox.pending(spec.parent_session_id) == []
        # The child ended in its log: a redelivery reports it, once.
        del backend.inbox.push_removing_releasing
        assert await ChildWorker(runtime, worker_id="w2").run(spec) is ChildStatus.DONE
        assert len(await backend.inbox.pending(spec.parent_session_id)) == 1
        await runtime.close()
    finally:
        await backend.close()


async def test_a_runs_first_boundary_lists_what_runs_with_the_first_append(
    pg_schema: str,  # noqa: F811
) -> None:
    # The first boundary's "still running" comes from the statement that
    # wrote the run's start and user turn: no registry read of its own, and
    # what it says is what the registry held.
    backend = PostgresBackend(PG_DSN, schema=pg_schema)
    shown: list[str] = []
    counting = _counter().count_statements()

    def answer(request: ModelRequest) -> Any:
        shown.append(repr(request.messages))
        counting.__exit__(None, None, None)
        return reply("done", usage=Usage(10, 5))

    try:
        async with Runtime(store=backend.store) as runtime:
            session = await runtime.create_session(Agent("first", FunctionModel(answer)))
            work = BackgroundActivity("job-7", "job", "a long job", 1_700_000_000.0)
            lapsed = BackgroundActivity("job-8", "job", "a lapsed job", 1_700_000_000.0)
            assert await backend.registry.add(session.id, work, 60.0, None)
            assert await backend.registry.add(session.id, lapsed, -1.0, None)
            sent = counting.__enter__()
            await session.run("go")
        kinds = dict(sent.by_kind)
        assert not [k for k in kinds if k.startswith("SELECT body FROM")], kinds
        fenced = sum(n for kind, n in kinds.items() if kind.startswith("WITH fence"))
        assert fenced == 1, kinds
        assert "still running" in shown[0] and "a long job" in shown[0], shown[0]
        assert "a lapsed job" not in shown[0], shown[0]
    finally:
        await backend.close()


@pytest.mark.parametrize("text", ["done", ""])
async def test_a_final_answer_lands_with_its_runs_end_in_one_statement(
    pg_schema: str,  # noqa: F811
    text: str,
) -> None:
    # Nothing pending: the answer and the run's end are one fenced append,
    # and the result the run returns is the one its log gives back.
    backend = PostgresBackend(PG_DSN, schema=pg_schema)
    agent = Agent("final", FunctionModel(lambda request: reply(text, usage=Usage(10, 5))))
    try:
        async with Runtime(store=backend.store) as runtime:
            session = await runtime.create_session(agent)
            await session.run("first")
            with _counter().count_statements() as sent:
                result = await session.run("second")
        kinds = dict(sent.by_kind)
        fenced = sum(n for kind, n in kinds.items() if kind.startswith("WITH fence"))
        assert fenced == 2, kinds  # the start with the user turn; the answer with the end
        assert result.text == text and result.rounds == 1
        assert result.empty_answer is (not text)
        # Read back by another process's runtime (its own pool).
        async with Runtime(store=PostgresBackend(PG_DSN, schema=pg_schema).store) as other:
            reopened = await other.open_session(session.id, agent)
            await reopened.journal.sync()
            assert reopened.journal.log.finished_result(session.id, agent) == result
            kinds_in_order = [e.kind for e in await reopened.entries()][-3:]
        assert kinds_in_order == ["message", "message", "run_finished"], kinds_in_order
    finally:
        await backend.close()


@pytest.mark.parametrize("interruption", ["notice", "steer"])
async def test_what_lands_during_the_final_answer_keeps_the_run_going(
    pg_schema: str,  # noqa: F811
    interruption: str,
) -> None:
    # The run's end is written with its answer only while the inbox is empty
    # and the log ends where the answer goes: a notice pushed, or a steer
    # appended, while the model answers lands the answer alone, and the run
    # folds it in another round, as a run always has.
    backend = PostgresBackend(PG_DSN, schema=pg_schema)
    shown: list[str] = []
    said = {"notice": "the job is done", "steer": "and one more thing"}[interruption]

    async def answer(request: ModelRequest) -> Any:
        shown.append(repr(request.messages))
        if len(shown) == 1:
            if interruption == "notice":
                notice = BackgroundNotice("job-1:end", "job-1", "job", said, "done")
                assert await backend.inbox.push(session.id, notice)
            else:
                await session.steer(said)
        return reply(f"answer {len(shown)}", usage=Usage(10, 5))

    try:
        async with Runtime(store=backend.store) as runtime:
            session = await runtime.create_session(Agent(interruption, FunctionModel(answer)))
            result = await session.run("go")
            entries = await session.entries()
            assert await backend.inbox.pending(session.id) == []
        assert len(shown) == 2 and said in shown[1], shown
        assert result.text == "answer 2" and result.rounds == 2
        assert [e.kind for e in entries].count("run_finished") == 1
        assert entries[-1].kind == "run_finished"
    finally:
        await backend.close()


async def test_appended_entries_data_go_as_a_binary_array(
    pg_schema: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Several entries in one statement: their data texts are sent as a binary
    # text[] (copied), never through the text form, which escapes every quote
    # of every JSON text with a regular expression; and they load back exactly.
    from psycopg.types import array

    from taskloom.backends import SessionMeta
    from taskloom.entries import Entry

    texted: list[Any] = []
    dump = array.ListDumper.dump

    def counting(self: Any, obj: Any) -> Any:
        texted.append(obj)
        return dump(self, obj)

    monkeypatch.setattr(array.ListDumper, "dump", counting)
    backend = PostgresBackend(PG_DSN, schema=pg_schema)
    odd = {"text": 'é \u0000 "q" \\ \n', "deep": [[{}]], "big": 1e300}
    try:
        store = backend.store
        await store.create(SessionMeta("s", "a"))
        first, _ = await store.append_all("s", [Entry("note", odd), Entry("note", {"n": 2})])
        assert texted == []
        assert [e.data for e in await store.load("s")] == [odd, {"n": 2}]
        assert first == 1
    finally:
        await backend.close()


@pytest.mark.parametrize("landed", [True, False])
async def test_a_final_answer_whose_write_raises_ends_as_the_log_says(
    pg_schema: str,  # noqa: F811
    landed: bool,
) -> None:
    # The statement with the run's end raises after it committed (a
    # connection lost then): the run ended, and is not failed after it; one
    # that raised before committing fails as a failed write always has.
    from taskloom.errors import StoreError

    backend = PostgresBackend(PG_DSN, schema=pg_schema)
    store = backend.store
    append_ending = store.append_ending

    async def lost(*args: Any, **kwargs: Any) -> Any:
        if landed:
            await append_ending(*args, **kwargs)
        raise StoreError("the connection was lost")

    agent = Agent("lost", FunctionModel(lambda request: reply("done", usage=Usage(10, 5))))
    try:
        async with Runtime(store=store) as runtime:
            session = await runtime.create_session(agent)
            store.append_ending = lost  # type: ignore[method-assign]
            if landed:
                result = await session.run("go")
                assert result.status.value == "completed" and result.text == "done"
            else:
                with pytest.raises(StoreError):
                    await session.run("go")
            del store.append_ending
            entries = await session.entries()
        ends = [e.data["status"] for e in entries if e.kind == "run_finished"]
        assert ends == (["completed"] if landed else ["failed"]), ends
    finally:
        await backend.close()


async def test_a_run_whose_end_landed_with_its_answer_is_not_failed_after_it(
    pg_schema: str,  # noqa: F811
) -> None:
    # What raises once the answer and the run's end are in (here a listener
    # of the round's event) does not write a second end, a failure, after
    # the run's own: a run ends once.
    backend = PostgresBackend(PG_DSN, schema=pg_schema)
    agent = Agent("heard", FunctionModel(lambda request: reply("done", usage=Usage(10, 5))))

    def emit(event: Any) -> None:
        if type(event).__name__ == "RoundCommitted":
            raise RuntimeError("the listener broke")

    try:
        async with Runtime(store=backend.store) as runtime:
            session = await runtime.create_session(agent)
            with pytest.raises(RuntimeError, match="the listener broke"):
                await session.run("go", emit=emit)
            entries = await session.entries()
        ends = [e for e in entries if e.kind == "run_finished"]
        assert len(ends) == 1, [e.data["status"] for e in ends]
        assert entries[-1] is ends[0] or entries[-1].position == ends[0].position
    finally:
        await backend.close()


async def test_a_final_answer_whose_write_and_read_back_both_raise_is_not_failed_after_its_end(
    pg_schema: str,  # noqa: F811
) -> None:
    # The statement with the run's end commits, then raises (a connection
    # lost), and the read-back that would tell raises too: whether the run
    # ended is unknown, so no failure is written after what may be its end
    # (the next take-up reads the log), as when a run's end entry's own
    # write raises.
    from taskloom.errors import StoreError

    backend = PostgresBackend(PG_DSN, schema=pg_schema)
    store = backend.store
    append_ending, load = store.append_ending, store.load
    down = [False]

    async def lost(*args: Any, **kwargs: Any) -> Any:
        await append_ending(*args, **kwargs)
        down[0] = True
        raise StoreError("the connection was lost")

    async def reading(*args: Any, **kwargs: Any) -> Any:
        if down[0]:
            down[0] = False  # back for the next statement
            raise StoreError("the server is restarting")
        return await load(*args, **kwargs)

    agent = Agent("lost", FunctionModel(lambda request: reply("done", usage=Usage(10, 5))))
    try:
        async with Runtime(store=store) as runtime:
            session = await runtime.create_session(agent)
            store.append_ending = lost  # type: ignore[method-assign]
            store.load = reading  # type: ignore[method-assign]
            with pytest.raises(StoreError):
                await session.run("go")
            del store.append_ending, store.load
            entries = await session.entries()
        ends = [e.data["status"] for e in entries if e.kind == "run_finished"]
        assert ends == ["completed"], ends
    finally:
        await backend.close()


@pytest.mark.parametrize("landing", ["", "notice", "steer"])
@pytest.mark.parametrize("cancels", [1, 2])
async def test_a_run_cancelled_twice_while_its_answer_and_end_are_written_ends_once(
    pg_schema: str,  # noqa: F811
    cancels: int,
    landing: str,
) -> None:
    # Cancelled (its stop signal too) while the statement with its answer and
    # end is out, then cancelled again before that statement answers: the
    # run does not write a STOPPED end of its own beside the one that may
    # land; its log ends once, with nothing after its end. Cancelled once,
    # it waits for that statement: ended there, or else (a notice in the
    # inbox or a steer kept the end out) ended STOPPED after its answer, as
    # before; its end told (`RunFinished`) either way.
    from taskloom import StopSignal

    backend = PostgresBackend(PG_DSN, schema=pg_schema)
    store = backend.store
    append_ending = store.append_ending
    entered, release, written = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await release.wait()
        try:
            return await append_ending(*args, **kwargs)
        finally:
            written.set()

    agent = Agent("twice", FunctionModel(lambda request: reply("done", usage=Usage(10, 5))))
    try:
        async with Runtime(store=store) as runtime:
            session = await runtime.create_session(agent)
            store.append_ending = held  # type: ignore[method-assign]
            stop = StopSignal()
            told: list[Any] = []
            run = asyncio.ensure_future(
                session.run("go", options=RunOptions(stop=stop), emit=told.append)
            )
            await entered.wait()
            if landing == "notice":
                pushed = BackgroundNotice("job-1:end", "job-1", "job", "done", "done")
                assert await backend.inbox.push(session.id, pushed)
            elif landing == "steer":
                await session.steer("and one more thing")
            stop.cancel()
            run.cancel()
            if cancels == 2:
                for _ in range(5):
                    await asyncio.sleep(0)
                run.cancel()
            else:
                release.set()
            with pytest.raises(asyncio.CancelledError):
                await run
            release.set()
            await written.wait()
            del store.append_ending
            entries = await session.entries()
        kinds = [e.kind for e in entries]
        assert kinds.count("run_finished") <= 1, kinds
        assert "run_finished" not in kinds or kinds[-1] == "run_finished", kinds
        if cancels == 1:
            assert kinds[-2:] == ["message", "run_finished"], kinds
            status = entries[-1].data["status"]
            assert status == ("stopped" if landing else "completed"), status
            # Told as it is written, as any run's end.
            finished = [e.result for e in told if type(e).__name__ == "RunFinished"]
            assert [r.status.value for r in finished] == [status], finished
            assert finished[0] == session.journal.log.finished_result(session.id, agent)
    finally:
        await backend.close()
