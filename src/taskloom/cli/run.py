"""`taskloom run`: one prompt against a real model, streamed to the terminal,
in a new session or (`--session`) an existing one.

Ctrl-C cancels the run: the turn in flight is discarded, everything before it
stays in the session, and the command says how to go on with it.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from rich.console import Console
from rich.text import Text

from ..agent import Agent
from ..errors import UsageError
from ..events import Event
from ..loop import RunOptions
from ..results import RunResult, RunStatus
from ..runtime import Runtime, Session
from .common import (
    AgentFlags,
    Run,
    Where,
    agent_flags,
    app_agent,
    command_line_agent,
    load_tool,
    open_runtime,
)
from .failures import with_hint
from .render import EventPrinter, Waiting, command_line, pending_summary, terminal, usage_table
from .text import visible

__all__ = ["interruptible", "report_result", "run_prompt", "run_settled"]

T = TypeVar("T")


def report_result(
    console: Console, session: Session[Any, Any], result: RunResult, where: Where, flags: AgentFlags
) -> int:
    """Print a finished run's usage and what it parked on, with the commands
    to go on; the exit code (0 when the run completed)."""
    console.print(usage_table(result, title=f"session {session.id}"), style="dim")
    if result.pending and not any(c.session_id for c in result.pending):
        stored = shlex.join(where.options())
        summary = pending_summary(session.id, result.pending, agent_flags(where, flags), stored)
        console.print(summary, crop=False)
    elif result.status is RunStatus.AWAITING_APPROVAL:
        # Parked on a child agent's escalated calls, which live in its log.
        show = shlex.join(["taskloom", "sessions", "show", session.id, *where.options()])
        console.print(
            Text("awaiting approval of calls a child agent escalated:", style="bold yellow")
        )
        console.print(command_line(f"  see them: {show}"), crop=False)
        again = shlex.join(["taskloom", "resume", session.id])
        decide = f"  decide each, then: {again} {agent_flags(where, flags)}"
        console.print(command_line(decide), crop=False)
    return 0 if result.ok else 1


async def interruptible(run: Awaitable[T], go_on: str, printer: EventPrinter) -> T:
    """Await `run`; when Ctrl-C cancels it, say on stderr that the session was
    kept and how to go on (`go_on`), and let the cancellation end the command
    (exit code 130). Either way the printer's waiting line is wiped first."""
    try:
        return await run
    except asyncio.CancelledError:
        printer.close()
        print(
            "taskloom: interrupted; the session keeps everything up to the interrupted step",
            file=sys.stderr,
        )
        print(f"  hint: go on with: {go_on}", file=sys.stderr)
        raise
    finally:
        printer.close()


async def run_settled(
    session: Session[Any, Any],
    run: Awaitable[RunResult],
    *,
    options: RunOptions | None = None,
    emit: Callable[[Event], None] | None = None,
    where: Sequence[str] = (),
) -> RunResult:
    """Await `run` of `session`; then, while its runs complete and background
    work of the session runs here, wait for that work and run the session on
    to deliver its reports. The result of the last run. What it waits for is
    said on stderr; Ctrl-C cuts the work off for the next run to take up."""
    result = await run
    background = session.runtime.background
    delivered: set[str] = set()
    said = ""
    while result.status is RunStatus.COMPLETED:
        waiting = {n.id for n in await background.inbox.pending(session.id)}
        if waiting - delivered:
            # Reported since the last run: the session goes on to take it.
            delivered = waiting
            result = await session.run(None, options=options, emit=emit)
            continue
        here, kept = set(background.running_here(session.id)), background.kept()
        tasks = [*background.running(session.id), *kept]
        if not tasks:
            break
        activities = await background.registry.list(session.id)
        # Work handed off (`keep`) is registered under the session like the rest.
        shown = [a for a in activities if a.id in here or kept]
        labels = "; ".join(f"{a.kind} {a.id[:8]} ({visible(a.description)})" for a in shown)
        labels = labels or f"{len(tasks)} piece(s) of background work"
        if labels != said:
            said = labels
            print(f"taskloom: waiting for {labels} (Ctrl-C stops waiting)", file=sys.stderr)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            show = shlex.join(["taskloom", "sessions", "show", session.id, "--tree", *where])
            print(
                f"taskloom: stopped waiting for {labels}: the session's next run takes it up",
                file=sys.stderr,
            )
            print(f"  hint: follow it with: {show}", file=sys.stderr)
            raise
    return result


async def _new_session(args: Run, runtime: Runtime) -> Session[Any, Any]:
    app, flags = args.where.app, args.flags
    if app:
        if not args.agent:
            raise with_hint(
                UsageError(f"run --app {app} needs the name of the agent to run"),
                "add --agent NAME (one of the app's Runtime.agents), or --session ID",
            )
        agent = app_agent(runtime, args.agent, app, "--agent names it")
        return await runtime.create_session(agent)
    if not flags.model:
        raise with_hint(
            UsageError("run needs a model"),
            "pass --model PROVIDER:MODEL (e.g. openai:gpt-4.1-mini), or --app module:factory",
        )
    from ..models import resolve_model

    model = resolve_model(flags.model, **flags.model_options())
    agent = Agent("cli", model, flags.system, [load_tool(t) for t in flags.tool])
    runtime.register_model(model)
    # For a reader of the store: how the session was started. Nothing reads
    # these back to build an agent.
    recorded = {"model": model.spec, "tools": list(flags.tool), "system": flags.system}
    return await runtime.create_session(agent, metadata=recorded)


async def _run(args: Run, console: Console) -> int:
    where, flags = args.where, args.flags
    # Going on with a session needs its store; only a new session may make one.
    async with await open_runtime(where, flags, create=not args.session_id) as runtime:
        if args.session_id:
            meta = await runtime.store.get(args.session_id)
            agent = command_line_agent(where, flags, runtime, meta, "run --session")
            session = await runtime.open_session(meta.id, agent)
        else:
            session = await _new_session(args, runtime)
        printer = EventPrinter(console, Waiting.on_stderr())
        options = flags.run_options()
        first = session.run(args.prompt, options=options, emit=printer)
        run = run_settled(session, first, options=options, emit=printer, where=where.options())
        go_on = shlex.join(["taskloom", "run", "--session", session.id])
        result = await interruptible(run, f"{go_on} {agent_flags(where, flags)} 'PROMPT'", printer)
        return report_result(console, session, result, where, flags)


def run_prompt(args: Run) -> int:
    """Run `args.prompt`; exit code 0 when the run completed, else 1."""
    return asyncio.run(_run(args, terminal()))
