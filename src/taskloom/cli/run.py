"""`taskloom run`: one prompt against a real model, streamed to the terminal,
in a new session or (`--session`) an existing one.

Ctrl-C cancels the run: the turn in flight is discarded, everything before it
stays in the session, and the command says how to go on with it.
"""

from __future__ import annotations

import argparse
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
from . import store_options
from .failures import with_hint
from .loading import (
    agent_flags,
    app_agent,
    command_line_agent,
    load_tool,
    model_options,
    open_runtime,
    run_options,
)
from .render import (
    EventPrinter,
    Waiting,
    command_line,
    pending_summary,
    terminal,
    usage_table,
)
from .text import visible

__all__ = ["interruptible", "load_tool", "report_result", "run_prompt", "run_settled"]

T = TypeVar("T")


def report_result(
    console: Console, session: Session[Any, Any], result: RunResult, args: argparse.Namespace
) -> int:
    """Print a finished run's usage and what it parked on; the exit code
    (0 when the run completed)."""
    console.print(usage_table(result, title=f"session {session.id}"), style="dim")
    if result.pending and not any(c.session_id for c in result.pending):
        where = shlex.join(store_options(args))
        summary = pending_summary(session.id, result.pending, agent_flags(args), where)
        console.print(summary, crop=False)
    elif result.status is RunStatus.AWAITING_APPROVAL:
        # Parked on a child agent's escalated calls, which live in its log.
        show = shlex.join(["taskloom", "sessions", "show", session.id, *store_options(args)])
        console.print(
            Text("awaiting approval of calls a child agent escalated:", style="bold yellow")
        )
        console.print(command_line(f"  see them: {show}"), crop=False)
        again = shlex.join(["taskloom", "resume", session.id])
        console.print(command_line(f"  decide each, then: {again} {agent_flags(args)}"), crop=False)
    return 0 if result.ok else 1


async def interruptible(run: Awaitable[T], go_on: str, printer: EventPrinter) -> T:
    """Await `run`, which prints its events with `printer`; when Ctrl-C
    cancels it, say on stderr that the session was kept and how to go on
    (`go_on`, a command line), then let the cancellation end the command
    (exit code 130). However it ends, the printer's waiting line is wiped
    first."""
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
    """Await `run` (a run of `session`); then, while the session's runs
    complete and background work of the session runs in this process (a
    background child a run took up, or handed off), wait for that work and
    run the session on (`session.run(None)`, with `options` and `emit`) to
    deliver what it reported, until none runs here and no new notice waits.
    The result of the last run.

    What it waits for is said on stderr. Ctrl-C while it waits says what is
    still running and how to follow it (`taskloom sessions show`, with
    `where`, the options naming the store), and the cancellation goes on:
    the work is cut off, and the session's next run takes it up."""
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


def _go_on_command(session_id: str, args: argparse.Namespace) -> str:
    words = ["taskloom", "run", "--session", session_id]
    return f"{shlex.join(words)} {agent_flags(args)} 'PROMPT'"


async def _new_session(args: argparse.Namespace, runtime: Runtime) -> Session[Any, Any]:
    if args.app:
        if not args.agent:
            raise with_hint(
                UsageError(f"run --app {args.app} needs the name of the agent to run"),
                "add --agent NAME (one of the app's Runtime.agents), or --session ID",
            )
        agent = app_agent(runtime, args.agent, args.app, "--agent names it")
        return await runtime.create_session(agent)
    if not args.model:
        raise with_hint(
            UsageError("run needs a model"),
            "pass --model PROVIDER:MODEL (e.g. openai:gpt-4.1-mini), or --app module:factory",
        )
    from ..models import resolve_model

    options = model_options(args)
    model = resolve_model(args.model, **options)
    agent = Agent("cli", model, args.system, [load_tool(t) for t in args.tool])
    runtime.register_model(model)
    # For a reader of the store: how the session was started. Nothing reads
    # these back to build an agent.
    recorded = {"model": model.spec, "tools": list(args.tool), "system": args.system}
    return await runtime.create_session(agent, metadata=recorded)


async def _run(args: argparse.Namespace, console: Console) -> int:
    # Going on with a session needs its store; only a new session may make one.
    async with await open_runtime(args, create=not args.session) as runtime:
        if args.session:
            meta = await runtime.store.get(args.session)
            agent = command_line_agent(args, runtime, meta, "run --session")
            session = await runtime.open_session(meta.id, agent)
        else:
            session = await _new_session(args, runtime)
        printer = EventPrinter(console, Waiting.on_stderr())
        options = run_options(args)
        first = session.run(args.prompt, options=options, emit=printer)
        where = store_options(args)
        run = run_settled(session, first, options=options, emit=printer, where=where)
        result = await interruptible(run, _go_on_command(session.id, args), printer)
        return report_result(console, session, result, args)


def run_prompt(args: argparse.Namespace) -> int:
    """Run `args.prompt`; exit code 0 when the run completed, 1 when it ended
    otherwise (awaiting approval, stopped, out of rounds...)."""
    return asyncio.run(_run(args, terminal()))
