"""A process for crash tests: runs one scenario against a durable store, then
blocks at a named point so the test can SIGKILL (or SIGSTOP) it there.

    python crash_child.py SCENARIO STORE_URL SCHEMA SESSION_ID SIDE_EFFECTS_FILE

It prints `READY <point>` on stdout when it reached the point, and
`COMMITTED <position>` after every append the store confirmed.

Scenario `tree-TOKENS-MAX_OUTPUT` runs a tree instead (`tree_agent`) under
`Budget(tokens=TOKENS, max_output_tokens=MAX_OUTPUT)`: its root hands a part
to an inline helper, then hangs in its next model request (`during-model`),
whose worst case is charged. `tree-bg-TOKENS-MAX_OUTPUT` spawns a background
child instead (`background_tree_agent`), and hangs once the child hangs in
its own model request.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from taskloom import Agent, Budget, RunOptions, Runtime, ToolContext, Usage, tool
from taskloom.backends import Fence, open_backend
from taskloom.delegation import Spawner, SubAgent, TaskDispatcher
from taskloom.entries import Entry
from taskloom.errors import UsageError
from taskloom.models import FunctionModel, ModelRequest, reply

SCENARIO, URL, SCHEMA, SESSION_ID, SIDE_EFFECTS = sys.argv[1:6]


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def hang(point: str) -> None:
    say(f"READY {point}")
    await asyncio.sleep(3600)


class ReportingStore:
    """Wraps the store: reports confirmed appends, and can hang before one."""

    def __init__(self, inner: Any, hang_before_results: bool, hang_before_end: bool) -> None:
        self._inner = inner
        self._hang = hang_before_results
        self._hang_before_end = hang_before_end
        self.leases = inner.leases

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, session_id: str, entry: Entry, *, fence: Fence | None = None) -> int:
        if self._hang and entry.kind == "message" and entry.data["message"]["role"] == "tool":
            await hang("before-results")
        if self._hang_before_end and entry.kind == "run_finished":
            await hang("before-end")  # the final answer is stored, the run's end is not
        position: int = await self._inner.append(session_id, entry, fence=fence)
        say(f"COMMITTED {position}")
        return position


@tool
async def charge(amount: int, ctx: ToolContext) -> str:
    """Charge a card (a side effect that must never run twice)."""
    with open(SIDE_EFFECTS, "a") as f:  # noqa: ASYNC230 (a test's side effect, synced on purpose)
        f.write(f"{ctx.call_id}\n")
        f.flush()
        os.fsync(f.fileno())
    if SCENARIO == "during-tool" or (SCENARIO.startswith("two-") and ctx.call_id == "call_1"):
        await hang("during-tool")
    return f"charged {amount}"


@tool(idempotent=True, needs_approval=SCENARIO == "approved")
async def upsert(amount: int, ctx: ToolContext) -> str:
    """Record a payment keyed by the call's idempotency key (safe to run again)."""
    with open(SIDE_EFFECTS, "a") as f:  # noqa: ASYNC230 (a test's side effect, synced on purpose)
        f.write(f"{ctx.idempotency_key}\n")
        f.flush()
        os.fsync(f.fileno())
    await hang("during-tool")
    return f"upserted {amount}"


async def model_fn(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if SCENARIO in ("notice", "first-model") or (
        SCENARIO == "during-model" and len(request.messages) > 1
    ):
        await hang("during-model")
    if last.role == "user" and len(request.messages) == 1:
        if SCENARIO in ("idempotent", "approved"):
            return reply(tool_calls=[("upsert", {"amount": 5}, "call_upsert")])
        if SCENARIO.startswith("two-"):
            # Two calls that each run alone: the second waits for the first.
            second = "upsert" if SCENARIO == "two-then-idempotent" else "charge"
            calls = [("charge", {"amount": 5}, "call_1"), (second, {"amount": 6}, "call_2")]
            return reply(tool_calls=calls)
        return reply(tool_calls=[("charge", {"amount": 5}, "call_charge")])
    return reply("done")


HELPER_USAGE = Usage(300, 200)
LEAD_USAGE = Usage(100, 20)


def tree_agent(lead: FunctionModel) -> Agent:
    """The tree of the `tree-` scenarios (test_tree_budget_crash.py resumes
    it with the same): root `lead`, whose tool `helper` answers "part done"
    inline."""
    helper_model = FunctionModel(lambda r: reply("part done", usage=HELPER_USAGE), name="small")
    helper = SubAgent("helper", "Helps with one part.", model=helper_model)
    return Agent("lead", lead, tools=[helper.tool()])


def background_tree_agent(lead: FunctionModel, child: FunctionModel) -> Agent:
    """The tree of the `tree-bg-` scenarios: root `lead`, whose `spawn_agent`
    runs `child` (named "deep") in the background."""
    return Agent("lead", lead, tools=[Spawner(child, dispatcher=TaskDispatcher())])


child_asking = asyncio.Event()


async def hanging_child(request: ModelRequest) -> Any:
    child_asking.set()
    await asyncio.Event().wait()


async def crashing_lead(request: ModelRequest) -> Any:
    if len(request.messages) == 1:
        if SCENARIO.startswith("tree-bg-"):
            task = {"name": "bg", "task": "think", "mode": "background"}
            return reply(tool_calls=[("spawn_agent", task, "c1")], usage=LEAD_USAGE)
        return reply(tool_calls=[("helper", {"task": "part one"}, "c1")], usage=LEAD_USAGE)
    if SCENARIO.startswith("tree-bg-"):
        await asyncio.wait_for(child_asking.wait(), 30)
    await hang("during-model")


async def run_tree(runtime: Runtime) -> None:
    tokens, max_output = SCENARIO.split("-")[-2:]
    budget = Budget(tokens=int(tokens), max_output_tokens=int(max_output))
    lead = FunctionModel(crashing_lead, name="small")
    if SCENARIO.startswith("tree-bg-"):
        agent = background_tree_agent(lead, FunctionModel(hanging_child, name="deep"))
    else:
        agent = tree_agent(lead)
    session = await runtime.open_session(SESSION_ID, agent)
    say("STARTED")
    await session.run("Do the parts.", options=RunOptions(budget=budget))


async def main() -> None:
    options: dict[str, Any] = (
        {"schema": SCHEMA} if URL.startswith("postgres") and SCHEMA != "-" else {}
    )
    inner = open_backend(URL, **options).store
    store = ReportingStore(
        inner,
        hang_before_results=SCENARIO == "before-results",
        hang_before_end=SCENARIO == "before-end",
    )
    runtime = Runtime(store=store)  # type: ignore[arg-type]
    if SCENARIO.startswith("tree-"):
        await run_tree(runtime)
        return
    model = FunctionModel(model_fn, name="crash")
    agent = Agent("crashy", model, tools=[charge, upsert])
    session = await runtime.open_session(SESSION_ID, agent)
    say("STARTED")
    if SCENARIO == "approved":
        # The parked turn the test approved, then (once its call started)
        # the runs that take up the call cut off in it.
        try:
            await session.resume()
        except UsageError:
            await session.run()
    else:
        await session.run("charge me 5" if SCENARIO != "notice" else "any news?")
    say("FINISHED")


asyncio.run(main())
