"""A process for the chaos tests: opens a session in a durable store and runs it.

    python session_child.py worker MODE URL SCHEMA
        Serves one trial per line read on stdin, `SESSION_ID SIDE_EFFECTS TAG`:
        opens the session, prints `READY`, waits for a `go` line, then calls
        `run()` (MODE `run`), `run(wait=True)` (`run-wait`), `resume()`
        (`resume`) or `resume(wait=True)` (`resume-wait`) and prints one
        `OUTCOME <kind> <detail>` line: `completed <status>`, `busy`
        (SessionBusy), `refused <message>` (UsageError: nothing to resume) or
        `error <type>: <message>`. An empty line or EOF ends the process.
    python session_child.py resume-hang URL SCHEMA SESSION_ID SIDE_EFFECTS
        Resumes a parked, approved turn; the gated tool records its call,
        prints `READY tool` and blocks, so the test can SIGKILL it there.
    python session_child.py park-and-exit URL SCHEMA SESSION_ID SIDE_EFFECTS
        Runs a turn that makes two gated calls and exits with status 137 right
        after the first approval entry is in the store (a crash at that point);
        prints `OUTCOME completed <status>` if no approval entry was written.

SCHEMA is a PostgreSQL schema, or `-`. Every tool appends its call id to
SIDE_EFFECTS (fsynced) before it returns: the record of what really ran.
Importing this module runs nothing; the tests share its tools and models.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from taskloom import Agent, RunResult, Runtime, Tool, ToolContext, tool
from taskloom.backends import Fence, open_backend
from taskloom.entries import Entry
from taskloom.errors import SessionBusy, UsageError
from taskloom.models import FunctionModel, ModelRequest, Reply, reply

ROUNDS = 3
"""Tool rounds each racing `run()` makes before its final answer."""

TWO_GATED_CALLS = (("pay", {"amount": 1}, "call_pay"), ("refund", {"amount": 2}, "call_refund"))


def say(line: str) -> None:
    """One line to the test, at once."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def record(side_effects: Path, call_id: str) -> None:
    """Append `call_id` to the side-effect file, durably (the test reads it after a kill)."""
    with side_effects.open("a") as f:
        f.write(call_id + "\n")
        f.flush()
        os.fsync(f.fileno())


def ran(side_effects: Path) -> list[str]:
    """The call ids that ran, in the order they ran."""
    return side_effects.read_text().split() if side_effects.exists() else []


def effect_tools(
    side_effects: Path, after: Callable[[], Awaitable[None]] | None = None
) -> list[Tool]:
    """`step` (ungated) and the gated `pay` and `refund`, recording every run;
    `after` runs inside `pay` once its side effect is recorded."""

    @tool
    async def step(n: int, ctx: ToolContext) -> str:
        """One step of work."""
        record(side_effects, ctx.call_id)
        return f"step {n} done"

    @tool(needs_approval=True)
    async def pay(amount: int, ctx: ToolContext) -> str:
        """Pay (needs approval)."""
        record(side_effects, ctx.call_id)
        if after is not None:
            await after()
        return f"paid {amount}"

    @tool(needs_approval=True)
    async def refund(amount: int, ctx: ToolContext) -> str:
        """Refund (needs approval)."""
        record(side_effects, ctx.call_id)
        return f"refunded {amount}"

    return [step, pay, refund]


def stepping_model(tag: str) -> FunctionModel:
    """`ROUNDS` tool rounds of `step` (call ids `<tag>-<n>`), then `done <tag>`."""
    asked = [0]

    def answer(request: ModelRequest) -> Reply:
        n = asked[0]
        asked[0] += 1
        if n < ROUNDS:
            return reply(tool_calls=[("step", {"n": n}, f"{tag}-{n}")])
        return reply(f"done {tag}")

    return FunctionModel(answer, name=f"steps-{tag}")


def text_model(text: str = "done") -> FunctionModel:
    """Answers every request with `text` (what a resumed turn asks next)."""
    return FunctionModel(lambda request: reply(text), name="text")


def two_gated_calls_model() -> FunctionModel:
    """Asks for `pay` and `refund` in one turn when the user speaks; else `done`."""

    def answer(request: ModelRequest) -> Reply:
        if request.messages[-1].role == "user":
            return reply(tool_calls=list(TWO_GATED_CALLS))
        return reply("done")

    return FunctionModel(answer, name="two-gated")


def open_runtime(url: str, schema: str, **options: Any) -> Runtime:
    """A runtime on the store at `url` (`schema` `-`: none)."""
    if schema != "-":
        options["schema"] = schema
    return Runtime(store=open_backend(url, **options).store)


def describe(exc: Exception) -> str:
    """The `OUTCOME` line for a run that raised."""
    if isinstance(exc, SessionBusy):
        return "busy"
    if isinstance(exc, UsageError) or "no turn parked" in str(exc):
        return f"refused {type(exc).__name__}: {exc}"
    return f"error {type(exc).__name__}: {' '.join(str(exc).split())}"


async def serve(mode: str, url: str, schema: str) -> None:
    """One trial per stdin line (see the module docstring)."""
    async with open_runtime(url, schema) as runtime:
        while True:
            line = sys.stdin.readline().split()
            if not line:
                return
            session_id, side_effects, tag = line
            resuming = mode.startswith("resume")
            model = text_model(f"done {tag}") if resuming else stepping_model(tag)
            agent = Agent("chaos", model, tools=effect_tools(Path(side_effects)))
            session = await runtime.open_session(session_id, agent)
            say("READY")
            # A blocking read on purpose: both processes sit in read() until the
            # test writes `go` to each, so their runs start within microseconds.
            if sys.stdin.readline().strip() != "go":
                return
            extra: dict[str, Any] = {"wait": True} if mode.endswith("-wait") else {}
            try:
                if resuming:
                    result: RunResult = await session.resume(**extra)
                else:
                    result = await session.run(f"work {tag}", **extra)
            except Exception as exc:
                say(f"OUTCOME {describe(exc)}")
            else:
                say(f"OUTCOME completed {result.status.value}")


async def resume_hang(url: str, schema: str, session_id: str, side_effects: str) -> None:
    """Resume; `pay` records its call, says `READY tool` and blocks until killed."""

    async def block() -> None:
        say("READY tool")
        await asyncio.Event().wait()

    async with open_runtime(url, schema) as runtime:
        agent = Agent("chaos", text_model(), tools=effect_tools(Path(side_effects), block))
        session = await runtime.open_session(session_id, agent)
        await session.resume()
        say("FINISHED")  # never reached when the tool blocks


class ExitAfterFirstApproval:
    """Wraps a store: the process exits (137) right after the first entry whose
    kind mentions approval is confirmed written, like a crash at that point."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, session_id: str, entry: Entry, *, fence: Fence | None = None) -> int:
        position: int = await self._inner.append(session_id, entry, fence=fence)
        if "approval" in entry.kind:
            os._exit(137)
        return position


async def park_and_exit(url: str, schema: str, session_id: str, side_effects: str) -> None:
    """Run a turn with two gated calls; die right after the first approval entry."""
    options: dict[str, Any] = {"schema": schema} if schema != "-" else {}
    store = ExitAfterFirstApproval(open_backend(url, **options).store)
    async with Runtime(store=store) as runtime:
        tools = effect_tools(Path(side_effects))
        session = await runtime.open_session(
            session_id, Agent("chaos", two_gated_calls_model(), tools=tools)
        )
        result = await session.run("pay 1 and refund 2")
        say(f"OUTCOME completed {result.status.value}")


def main(argv: list[str]) -> None:
    """Dispatch on the scenario named first (see the module docstring)."""
    scenario, *args = argv
    if scenario == "worker":
        asyncio.run(serve(*args))
    elif scenario == "resume-hang":
        asyncio.run(resume_hang(*args))
    elif scenario == "park-and-exit":
        asyncio.run(park_and_exit(*args))
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
