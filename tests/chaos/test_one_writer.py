"""One writer per session: two processes that run (or resume) the same session
at the same moment never interleave their turns, and an approved call runs once.

Each test keeps two long-lived worker processes (session_child.py) and plays
20 trials through them: the test creates a session, both workers open it and
print READY, then the test writes `go` to both, so both runs start within
microseconds of each other. The loser of the race either waits (`wait=True`)
or gets `SessionBusy`; it never writes into the other's run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from chaos_support import (  # noqa: F401 (durable is a fixture)
    Child,
    durable,
    log_problems,
    parked_and_approved,
    store_name,
    summary,
)
from session_child import ROUNDS, open_runtime, ran, text_model

from pg import pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, Runtime
from taskloom.entries import EntryKind

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TRIALS = 20


@pytest.fixture
async def runtime(durable: tuple[str, str]) -> AsyncIterator[Runtime]:  # noqa: F811
    rt = open_runtime(*durable)
    yield rt
    await rt.close()


class Race:
    """Two workers in one mode; `trial()` races them on one session."""

    def __init__(self, mode: str, url: str, schema: str) -> None:
        self.workers = [Child("worker", mode, url, schema) for _ in range(2)]

    def trial(self, session_id: str, side_effects: Path, n: int) -> list[str]:
        """Race both workers on the session; their `OUTCOME` lines, minus the prefix."""
        for tag, worker in zip("ab", self.workers, strict=True):
            worker.send(f"{session_id} {side_effects} {tag}{n}")
        for worker in self.workers:
            worker.expect("READY")
        for worker in self.workers:
            worker.send("go")
        return [w.expect("OUTCOME ", timeout=60).removeprefix("OUTCOME ") for w in self.workers]

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


@pytest.fixture
def race(request: pytest.FixtureRequest, durable: tuple[str, str]) -> Iterator[Race]:  # noqa: F811
    """Workers in the mode the test names with `@pytest.mark.parametrize("race", [...])`."""
    r = Race(request.param, *durable)
    yield r
    r.close()


def tally(outcomes: list[str]) -> Counter[str]:
    return Counter(o.split()[0] for o in outcomes)


@pytest.mark.parametrize("race", ["run"], indirect=True)
async def test_two_processes_running_one_session_never_interleave(
    race: Race,
    runtime: Runtime,
    durable: tuple[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    interleaved = bad_outcomes = double_runs = 0
    seen: Counter[str] = Counter()
    examples: list[str] = []
    for n in range(TRIALS):
        session = await runtime.create_session(Agent("chaos", text_model()))
        side_effects = tmp_path / f"effects-{n}.txt"
        side_effects.touch()
        outcomes = race.trial(session.id, side_effects, n)
        kinds = tally(outcomes)
        seen.update(kinds)
        problems = log_problems(await runtime.store.load(session.id))
        effects = ran(side_effects)
        if problems:
            interleaved += 1
            examples.append(f"trial {n}: {problems[:3]}")
        if set(kinds) - {"completed", "busy"} or not kinds["completed"]:
            bad_outcomes += 1
            examples.append(f"trial {n}: outcomes {outcomes}")
        if len(effects) != len(set(effects)) or len(effects) != ROUNDS * kinds["completed"]:
            double_runs += 1
            examples.append(f"trial {n}: side effects {effects}")
    line = summary(
        f"{store_name(durable[0])} run race",
        TRIALS,
        interleaved=interleaved,
        double_runs=double_runs,
        bad_outcomes=bad_outcomes,
    )
    print(f"  outcomes: {dict(seen)}")
    assert (interleaved, double_runs, bad_outcomes) == (0, 0, 0), (line, examples[:6])


@pytest.mark.parametrize("race", ["resume"], indirect=True)
async def test_two_processes_resuming_one_approved_turn_run_the_tool_once(
    race: Race,
    runtime: Runtime,
    durable: tuple[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    interleaved = bad_outcomes = double_runs = 0
    seen: Counter[str] = Counter()
    examples: list[str] = []
    for n in range(TRIALS):
        side_effects = tmp_path / f"effects-{n}.txt"
        side_effects.touch()
        session_id = await parked_and_approved(runtime, side_effects)
        outcomes = race.trial(session_id, side_effects, n)
        kinds = tally(outcomes)
        seen.update(kinds)
        problems = log_problems(await runtime.store.load(session_id))
        effects = ran(side_effects)
        if problems:
            interleaved += 1
            examples.append(f"trial {n}: {problems[:3]}")
        # The loser is told the session is busy, or (if it came after the
        # winner finished) that nothing is parked any more.
        if set(kinds) - {"completed", "busy", "refused"} or kinds["completed"] != 1:
            bad_outcomes += 1
            examples.append(f"trial {n}: outcomes {outcomes}")
        if effects != ["call_pay"]:
            double_runs += 1
            examples.append(f"trial {n}: side effects {effects}")
    line = summary(
        f"{store_name(durable[0])} resume race",
        TRIALS,
        double_runs=double_runs,
        interleaved=interleaved,
        bad_outcomes=bad_outcomes,
    )
    print(f"  outcomes: {dict(seen)}")
    assert (double_runs, interleaved, bad_outcomes) == (0, 0, 0), (line, examples[:6])


@pytest.mark.parametrize("race", ["run-wait"], indirect=True)
async def test_with_wait_both_runs_complete_one_after_the_other(
    race: Race,
    runtime: Runtime,
    durable: tuple[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    interleaved = not_both_completed = wrong_steps = 0
    examples: list[str] = []
    for n in range(TRIALS):
        session = await runtime.create_session(Agent("chaos", text_model()))
        side_effects = tmp_path / f"effects-{n}.txt"
        side_effects.touch()
        outcomes = race.trial(session.id, side_effects, n)
        entries = await runtime.store.load(session.id)
        problems = log_problems(entries)
        finished = [e.data.get("status") for e in entries if e.kind == EntryKind.RUN_FINISHED]
        effects = ran(side_effects)
        if problems:
            interleaved += 1
            examples.append(f"trial {n}: {problems[:3]}")
        if outcomes != ["completed completed"] * 2 or finished != ["completed"] * 2:
            not_both_completed += 1
            examples.append(f"trial {n}: outcomes {outcomes}, run_finished {finished}")
        if len(effects) != 2 * ROUNDS or len(set(effects)) != len(effects):
            wrong_steps += 1
            examples.append(f"trial {n}: side effects {effects}")
    line = summary(
        f"{store_name(durable[0])} run(wait=True) race",
        TRIALS,
        not_both_completed=not_both_completed,
        interleaved=interleaved,
        wrong_steps=wrong_steps,
    )
    assert (not_both_completed, interleaved, wrong_steps) == (0, 0, 0), (line, examples[:6])
