"""A writer killed mid-run is taken over at once on the same machine.

No clock tricks here: the process holding the session's lease is SIGKILLed
while its approved tool runs, and the very next `run()` (without `wait`)
must get the session, not `SessionBusy`, because the dead holder is
recognised as gone. The cut-off call is answered "interrupted", never rerun.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chaos_support import (  # noqa: F401 (durable is a fixture)
    Child,
    durable,
    log_problems,
    messages_of,
    parked_and_approved,
    store_name,
    summary,
)
from session_child import effect_tools, open_runtime, ran, text_model

from pg import pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, RunStatus
from taskloom.errors import SessionBusy
from taskloom.log import INTERRUPTED

TRIALS = 10


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_dead_writer_is_taken_over_without_waiting_for_its_lease(
    durable: tuple[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    busy = reruns = not_interrupted = broken = 0
    examples: list[str] = []
    async with open_runtime(*durable) as runtime:
        for n in range(TRIALS):
            side_effects = tmp_path / f"effects-{n}.txt"
            side_effects.touch()
            session_id = await parked_and_approved(runtime, side_effects)
            child = Child("resume-hang", *durable, session_id, str(side_effects))
            try:
                child.expect("READY tool")  # it holds the lease and runs the tool
            finally:
                child.kill()
            agent = Agent("chaos", text_model("recovered"), tools=effect_tools(side_effects))
            session = await runtime.open_session(session_id, agent)
            try:
                result = await session.run("go on")  # no wait: the holder is dead
            except SessionBusy as exc:
                busy += 1
                examples.append(f"trial {n}: {exc}")
                continue
            entries = await session.entries()
            if ran(side_effects) != ["call_pay"]:
                reruns += 1
            answers = [
                (r.content, r.is_error)
                for m in messages_of(entries)
                for r in m.results
                if r.tool_call_id == "call_pay"
            ]
            if answers != [(INTERRUPTED, True)]:
                not_interrupted += 1
                examples.append(f"trial {n}: {answers}")
            problems = log_problems(entries)
            if result.status is not RunStatus.COMPLETED or problems:
                broken += 1
                examples.append(f"trial {n}: {result.status.value} {problems[:3]}")
    line = summary(
        f"{store_name(durable[0])} takeover of a killed writer",
        TRIALS,
        busy=busy,
        reruns=reruns,
        not_interrupted=not_interrupted,
        broken=broken,
    )
    assert (busy, reruns, not_interrupted, broken) == (0, 0, 0, 0), (line, examples[:6])
