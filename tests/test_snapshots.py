"""Snapshots of the session fold: snapshot + tail reads exactly like a full replay.

Random logs (seeded trials) of every entry kind the fold handles are folded
whole, and folded from a chain of snapshots taken at random points plus the
entries after; the two logs must agree on everything the loop and the
runtime read. Then through the runtime on every store: a session opened
from its snapshot equals one opened by full replay, a log from before
snapshots opens by replay and gains one, and unusable rows are ignored.
"""

from __future__ import annotations

import json
import random
import tracemalloc
from collections.abc import Sequence
from typing import Any

import pytest

from pg import pg_schema, requires_postgres  # noqa: F401 (fixture)
from taskloom import Agent, Runtime, ToolEffect, Usage, tool
from taskloom.entries import (
    ApprovalDecision,
    ApprovalRequests,
    CallsStarted,
    CompactionEntry,
    DeferredEntry,
    DeferredItem,
    Entry,
    ForkLink,
    MessageEntry,
    ModelChange,
    Payload,
    RequestedCall,
    RunFinishedEntry,
    RunStartedEntry,
    Steer,
    StopRequest,
    SubagentLink,
    SubagentReport,
)
from taskloom.log import SNAPSHOT_VERSION, SessionLog, encode_snapshot, read_snapshot
from taskloom.messages import Message, ToolCall, ToolResult
from taskloom.models import ScriptedModel, reply
from taskloom.results import RunStatus

# ------------------------------------------------------------ random logs


def _random_log(rng: random.Random, length: int) -> list[Entry]:
    """`length` entries shaped like real sessions, as a store would return them."""
    entries: list[Entry] = []
    open_calls: list[ToolCall] = []
    steers: list[int] = []
    turn = 0
    call_n = 0

    def add(payload: Payload) -> None:
        # Through JSON, as every store hands data back.
        data = json.loads(json.dumps(payload.to_data()))
        position = len(entries) + 1
        entries.append(Entry(payload.KIND, data, "run", position, 1000.0 + position))

    while len(entries) < length:
        roll = rng.random()
        if open_calls and roll < 0.35:
            results = [ToolResult(c.id, f"r{c.id}", rng.random() < 0.2, c.name) for c in open_calls]
            add(MessageEntry(Message.tool_results(results)))
            open_calls = []
        elif roll < 0.55:
            calls = []
            for _ in range(rng.choice([0, 1, 1, 2])):
                call_n += 1
                # Ids a provider reuses now and then, as some servers do.
                cid = f"call_{call_n % 7}" if rng.random() < 0.3 else f"call_{call_n}"
                calls.append(ToolCall(cid, "add", {"a": call_n}))
            delivered = "notice" if rng.random() < 0.15 else None
            add(
                MessageEntry(
                    Message.assistant(f"a{len(entries)}", tool_calls=calls),
                    delivered,
                    ("n1",) if delivered else (),
                )
            )
            turn = len(entries)
            open_calls = calls
        elif roll < 0.62:
            folds = tuple(steers) if steers and rng.random() < 0.7 else ()
            steers = [s for s in steers if s not in folds]
            add(MessageEntry(Message.user(f"u{len(entries)}"), folds=folds))
        elif roll < 0.67:
            add(Steer(f"steer {len(entries)}"))
            steers.append(len(entries))
        elif roll < 0.70:
            add(DeferredEntry("d", DeferredItem.context(f"later {len(entries)}")))
            steers.append(len(entries))
        elif roll < 0.74 and open_calls:
            calls = tuple(RequestedCall(c.id, c.name, c.arguments, "h") for c in open_calls)
            add(ApprovalRequests(turn, calls))
        elif roll < 0.78 and open_calls:
            c = rng.choice(open_calls)
            add(ApprovalDecision(c.id, rng.random() < 0.5, "h", turn, "note"))
        elif roll < 0.80 and open_calls:
            add(CallsStarted(turn, tuple(c.id for c in open_calls)))
        elif roll < 0.83:
            add(ModelChange(model=f"m{len(entries)}", model_changed=True))
        elif roll < 0.85:
            add(ModelChange(reasoning={"effort": "low"}, reasoning_changed=True))
        elif roll < 0.87:
            add(StopRequest("enough"))
        elif roll < 0.89 and len(entries) > 3:
            add(CompactionEntry(f"summary {len(entries)}", rng.randrange(1, len(entries))))
        elif roll < 0.93:
            add(
                RunStartedEntry(
                    "main", rng.random() < 0.3, "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
                )
            )
        elif roll < 0.96:
            add(RunFinishedEntry(RunStatus.COMPLETED, None, Usage(3, 4), 2, 2))
        elif roll < 0.98:
            add(SubagentLink(f"child{len(entries)}", "helper", call_id="call_1"))
        elif roll < 0.99:
            # A fork's link (it reopens a turn parked there).
            add(ForkLink("origin", len(entries)))
        else:
            add(SubagentReport(f"child{len(entries)}", "done"))
    return entries


def _fingerprint(log: SessionLog) -> dict[str, Any]:
    """Everything readers of a fold look at."""
    cut_off = log.cut_off_results()
    return {
        "position": log.position,
        "messages": [m.to_dict() for m in log.messages],
        "positions": list(log.positions),
        "view": [m.to_dict() for m in log.view()],
        "view_chars": log.view_chars(),
        "pending": [e.position for e in log.pending],
        "model": (log.model_spec, log.model_position, log.reasoning, log.reasoning_set),
        "requests": dict(log.requests),
        "decisions": dict(log.decisions),
        "started": set(log.started),
        "call_ids": set(log.call_ids),
        "turn": log.turn,
        "turn_message": log.turn_message.to_dict() if log.turn_message else None,
        "assistant_turns": log.assistant_turns,
        "stop_position": log.stop_position,
        "compaction": log.compaction,
        "open_calls": log.open_calls(),
        "parked": log.parked(),
        "reopened": log.reopened(),
        "escalated": dict(log.escalated),
        "cut_off": cut_off.to_dict() if cut_off else None,
        "last_text": log.last_assistant_text(),
        "traceparent": log.run_traceparent(),
        "finished": log.last_finished.position if log.last_finished else None,
    }


def _replay(entries: list[Entry]) -> SessionLog:
    log = SessionLog()
    for e in entries:
        log.apply(e)
    return log


def _snapshot_rows(entries: list[Entry], cuts: list[int]) -> list[tuple[int, str]]:
    """Rows as a writer folding `entries` would leave them, one at each cut."""
    log = SessionLog()
    rows = []
    done = 0
    for cut in cuts:
        for e in entries[done:cut]:
            log.apply(e)
        done = cut
        rows.append((cut, encode_snapshot(log)))
        log.snapshotted(cut)
    return rows


def _restored(entries: list[Entry], rows: list[tuple[int, str]]) -> SessionLog:
    snapshot = read_snapshot(rows)
    if snapshot is None:
        return _replay(entries)
    assert snapshot.matches(entries[snapshot.position - 1])
    log = snapshot.restore()
    for e in entries[snapshot.position :]:
        log.apply(e)
    return log


@pytest.mark.parametrize("seed", range(60))
def test_snapshot_and_tail_fold_like_a_full_replay(seed: int) -> None:
    rng = random.Random(seed)
    entries = _random_log(rng, rng.randrange(5, 160))
    cuts = sorted(rng.sample(range(1, len(entries) + 1), rng.randrange(1, 5)))
    rows = _snapshot_rows(entries, cuts)
    restored = _restored(entries, rows)
    assert restored.base == cuts[-1]
    assert _fingerprint(restored) == _fingerprint(_replay(entries))


@pytest.mark.parametrize("seed", range(20))
def test_a_restored_log_snapshots_again_and_still_folds_alike(seed: int) -> None:
    rng = random.Random(1000 + seed)
    entries = _random_log(rng, 120)
    first = _snapshot_rows(entries, [40])
    log = _restored(entries[:70], first)  # opened at 70, before its older messages decode
    rows = [*first, (70, encode_snapshot(log))]
    assert _fingerprint(_restored(entries, rows)) == _fingerprint(_replay(entries))


def test_unusable_rows_are_ignored_and_the_rest_replayed() -> None:
    entries = _random_log(random.Random(7), 100)
    good = _snapshot_rows(entries, [30, 60])
    other_version = json.loads(good[1][1]) | {"v": SNAPSHOT_VERSION + 1}
    cases = [
        [good[0], (60, "{not json")],  # the second row is corrupt: the chain ends at 30
        [good[0], (60, json.dumps(other_version))],  # a newer writer's row
        [good[1]],  # a row whose predecessor is gone: no chain at all
        [(30, '{"v": 1, "from": 0, "state": {}}')],  # well-formed JSON, wrong shape
    ]
    full = _fingerprint(_replay(entries))
    for rows in cases:
        snapshot = read_snapshot(rows)
        assert snapshot is None or snapshot.position == 30
        try:
            log = _restored(entries, rows)
        except (KeyError, TypeError, ValueError):
            log = _replay(entries)  # what the session does with a row it cannot restore
        assert _fingerprint(log) == full


def test_a_view_stays_what_it_was_while_the_log_grows() -> None:
    entries = _random_log(random.Random(3), 60)
    log = _replay(entries[:30])
    view = log.view(Message.user("extra"))
    before = list(view)
    assert isinstance(view, Sequence) and len(view) == len(before)
    for e in entries[30:]:
        log.apply(e)
    assert list(view) == before and view == tuple(before)
    assert view[-1].text == "extra" and list(reversed(view)) == before[::-1]
    assert view[1:3] == tuple(before[1:3])


def _message_entry(position: int) -> Entry:
    return Entry(
        "message", MessageEntry(Message.user(f"m{position}")).to_data(), None, position, 1.0
    )


def test_a_compacted_view_starts_with_the_summary_and_is_not_a_copy() -> None:
    log = SessionLog()
    for i in range(1, 5):
        log.apply(_message_entry(i))
    log.apply(Entry("compaction", CompactionEntry("sum", 2).to_data(), None, 5, 1.0))
    view = log.view()
    assert [m.text for m in view][1:] == ["m3", "m4"] and "sum" in view[0].text
    # It reads the log's list: on a long log, a copy of the references alone
    # would take 8 bytes a message.
    for i in range(6, 20_006):
        log.apply(_message_entry(i))
    assert len(log.view()) == 20_003
    tracemalloc.start()
    try:
        view = log.view()
        _, allocated = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert view[-1].text == "m20005" and allocated < 20_000, allocated


# ------------------------------------------------------------ through the runtime


@tool(effect=ToolEffect.READ_ONLY)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _agent(rounds: int) -> Agent:
    script = [reply(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(rounds)]
    return Agent("main", ScriptedModel([*script, reply("done")]), tools=[add])


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    from taskloom.backends import open_backend
    from taskloom.backends.memory import MemoryStore

    if request.param == "memory":
        return MemoryStore()
    if request.param == "sqlite":
        return open_backend(f"sqlite:///{tmp_path / 'snap.db'}").store
    from pg import IN_CI, PG_DSN, postgres_reachable

    problem = postgres_reachable()
    if problem is not None and not IN_CI:
        pytest.skip(f"PostgreSQL unreachable: {problem}")
    return open_backend(PG_DSN, schema=request.getfixturevalue("pg_schema")).store


async def test_a_session_opens_from_its_snapshot_like_a_full_replay(store: Any) -> None:
    async with Runtime(store=store, snapshot_every=7) as runtime:
        session = await runtime.create_session(_agent(12))
        await session.run("go")
        await session.steer("and then?")
        full = Runtime(store=store, snapshot_every=0)
        replayed = await full.open_session(session.id, _agent(0))
        opened = await Runtime(store=store, snapshot_every=7).open_session(session.id, _agent(0))
        assert replayed.journal.log.base == 0
        assert 0 < opened.journal.log.base <= opened.journal.log.position
        assert _fingerprint(opened.journal.log) == _fingerprint(replayed.journal.log)
        assert await opened.entries() == await replayed.entries()
        assert await opened.transcript() == await replayed.transcript()


async def test_a_log_from_before_snapshots_opens_by_replay_and_gains_one(store: Any) -> None:
    old = Runtime(store=store, snapshot_every=0)
    session = await old.create_session(_agent(10))
    await session.run("go")
    runtime = Runtime(store=store, snapshot_every=5)
    assert runtime.snapshots is not None
    assert await runtime.snapshots.read(session.id) == []
    reopened = await runtime.open_session(session.id, _agent(3))
    assert reopened.journal.log.base == 0
    await reopened.run("more")
    rows = await runtime.snapshots.read(session.id)
    assert rows and json.loads(rows[0][1])["from"] == 0
    again = await Runtime(store=store, snapshot_every=5).open_session(session.id, _agent(0))
    full = await Runtime(store=store, snapshot_every=0).open_session(session.id, _agent(0))
    assert again.journal.log.base > 0
    assert _fingerprint(again.journal.log) == _fingerprint(full.journal.log)
    await runtime.close()


async def test_a_snapshot_of_a_stale_writer_is_refused(store: Any) -> None:
    from taskloom.backends import Fence
    from taskloom.errors import StaleLeaseError

    runtime = Runtime(store=store)
    session = await runtime.create_session(_agent(0))
    await session.run("go")
    snapshots = runtime.snapshots
    assert snapshots is not None
    key = f"session:{session.id}"
    with pytest.raises(StaleLeaseError):
        await snapshots.write(session.id, 1, "{}", fence=Fence(key, 10_000))
    assert await snapshots.read(session.id) == []
    await runtime.close()


def test_a_fork_link_reopens_a_parked_turn_and_a_snapshot_keeps_it() -> None:
    calls = [ToolCall("c1", "pay", {"amount": 5}), ToolCall("c2", "add", {"a": 1})]
    payloads: list[Payload] = [
        MessageEntry(Message.user("pay")),
        MessageEntry(Message.assistant("", tool_calls=calls)),
        ApprovalRequests(2, (RequestedCall("c1", "pay", {"amount": 5}, "h"),)),
        ApprovalDecision("c1", False, "h", 2, "no"),
        ForkLink("origin", 4),
    ]
    entries = [
        Entry(p.KIND, json.loads(json.dumps(p.to_data())), "run", i, 1000.0 + i)
        for i, p in enumerate(payloads, 1)
    ]
    before = _replay(entries[:4])
    assert before.parked() == calls and before.undecided_calls() == []
    log = _replay(entries)
    # Nothing pending, nothing decided, nothing cut off: the next run takes it up.
    assert (log.parked(), log.pending_calls(), log.cut_off()) == ([], [], [])
    assert (dict(log.requests), dict(log.decisions)) == ({}, {})
    assert log.reopened() == calls
    for cut in (4, 5):
        restored = _restored(entries, _snapshot_rows(entries, [cut]))
        assert restored.reopened() == calls
        assert _fingerprint(restored) == _fingerprint(log)
