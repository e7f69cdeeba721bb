"""`taskloom sessions list|show|fork|diff`, `taskloom approve`, `taskloom answer`,
`taskloom resume`.

They work on the embedded store by default (`--store` for another, or the
store of the Runtime `--app` returns), from any process: everything they
show is in the session's log. None of them creates a store: a store that is
not there is an error naming it. Reading, forking, diffing and deciding build
no agent; `resume` builds the session's agent from its own command line (see
`taskloom.cli.common`).
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from ..agent import Agent
from ..backends import SessionMeta
from ..background import CHILDREN_LOOKED_AT
from ..delegation import ChildStatus, DecidedChildren, child_status
from ..entries import CompactionEntry, RequestedCall
from ..errors import SessionNotFound, UsageError
from ..log import SessionLog, conversation, pending_inputs
from ..messages import Message
from ..models import FunctionModel, ModelRequest
from ..results import PendingInput
from ..runtime import SERVED_KEY, RunDemand, Runtime, SessionTools, diff_sessions, fork_session
from .common import (
    Answer,
    Approve,
    Command,
    Diff,
    Fork,
    ListSessions,
    Resume,
    Show,
    agent_flags,
    command_line_agent,
    open_runtime,
)
from .failures import EXIT_FAILED, with_hint
from .queue import QueueIfThere, store_queue
from .render import (
    EventPrinter,
    Waiting,
    approval_block,
    command_line,
    decide_line,
    fold,
    question_block,
    terminal,
)
from .run import interruptible, report_result, run_settled
from .summary import SessionSummary, summarize, to_json
from .text import visible

__all__ = ["dispatch", "render_message"]


def render_message(message: Message) -> list[Text]:
    """A message as lines: text in full, tool calls and results folded to one
    line each (calls awaiting a decision are shown in full elsewhere)."""
    lines: list[Text] = []
    prefix = f"[{visible(message.origin)}] " if message.origin else ""
    style = {"user": "bold cyan", "assistant": "bold green", "tool": "bold magenta"}[message.role]
    if message.text:
        lines.append(Text.assemble((f"{prefix}{message.role}: ", style), visible(message.text)))
    for call in message.tool_calls:
        args = fold(json.dumps(call.arguments, ensure_ascii=False, default=str), 100)
        called = f"{visible(call.name)}({args})  "
        lines.append(
            Text.assemble((f"{prefix}  → ", style), called, (f"[{visible(call.id)}]", "dim"))
        )
    for result in message.results:
        mark = ("✗", "red") if result.is_error else ("✓", "green")
        said = f"{visible(result.tool_name)}: {fold(result.content, 160)}"
        lines.append(Text.assemble((f"{prefix}  {mark[0]} ", mark[1]), said))
    return lines


async def _log(runtime: Runtime, session_id: str) -> tuple[SessionMeta, SessionLog]:
    meta = await runtime.store.get(session_id)
    return meta, SessionLog.folded(await runtime.store.load(session_id))


async def _list(runtime: Runtime, console: Console, args: ListSessions) -> int:
    rows = [await summarize(runtime, meta) for meta in await runtime.store.list(limit=args.limit)]
    if args.json:
        print(to_json([row.to_dict() for row in rows]))
        return 0
    if not rows:
        console.print(Text(f"no sessions in {args.where.named()}"), soft_wrap=True)
        return 0
    agents = [visible(r.meta.agent or "-") for r in rows]
    statuses = [_status(r) for r in rows]
    width = max(len("AGENT"), *(len(a) for a in agents))
    status_width = max(len("STATUS"), *(len(st) for st in statuses))
    id_width = max(len(r.meta.id) for r in rows)
    head = f"{'ID':<{id_width}}  {'CREATED':<19}  {'STATUS':<{status_width}}  "
    header = Text(f"{head}{'AGENT':<{width}}  PENDING  LAST PROMPT", style="bold")
    console.print(header, soft_wrap=True)
    for row, agent, status in zip(rows, agents, statuses, strict=True):
        meta = row.meta
        when = datetime.fromtimestamp(meta.created_at).strftime("%Y-%m-%d %H:%M:%S")
        prompt = fold(row.last_prompt, 60) if row.last_prompt else "-"
        if meta.parent_id:
            prompt = f"(child of {visible(meta.parent_id)}) {prompt}"
        pending = str(len(row.pending)) if row.pending else "-"
        line = (
            f"{visible(meta.id):<{id_width}}  {when}  {status:<{status_width}}  "
            f"{agent:<{width}}  {pending:<7}  {prompt}"
        )
        # Never wrapped: ids are copied from here, whole.
        console.print(Text(line), soft_wrap=True)
    return 0


def _status(row: SessionSummary) -> str:
    # An interrupted run says since when.
    if row.interrupted_at is None:
        return row.status
    since = datetime.fromtimestamp(row.interrupted_at).strftime("%Y-%m-%d %H:%M:%S")
    return f"{row.status} since {since}"


async def _tree(runtime: Runtime, meta: SessionMeta, node: Tree) -> None:
    for child in reversed(await runtime.store.list(parent_id=meta.id)):
        status = await child_status(runtime, child.id)
        md = child.metadata
        label = Text.assemble(
            (visible(str(md.get("name", child.agent))), "bold"),
            f" {visible(child.id[:8])} ",
            (f"[{status.value}]", "green" if status.value == "done" else "yellow"),
            f" {visible(str(md.get('mode', 'inline')))}: {fold(str(md.get('task', '')), 70)}",
        )
        await _tree(runtime, child, node.add(label))


async def _show_json(runtime: Runtime, session_id: str) -> int:
    row = await summarize(runtime, await runtime.store.get(session_id))
    children = [
        {
            "id": child.id,
            "agent": child.agent,
            "status": (await child_status(runtime, child.id)).value,
        }
        for child in reversed(await runtime.store.list(parent_id=session_id))
    ]
    shown = {
        **row.to_dict(),
        "messages": [m.to_dict() for m in row.log.messages],
        "children": children,
    }
    print(to_json(shown))
    return 0


async def _show(runtime: Runtime, console: Console, args: Show) -> int:
    if args.json:
        return await _show_json(runtime, args.session_id)
    meta, log = await _log(runtime, args.session_id)
    where = args.where.options()
    store_flags = shlex.join(where)
    if args.tree:
        title = Text.assemble(
            (visible(meta.agent or "session"), "bold"), f" {visible(meta.id[:8])}"
        )
        root = Tree(title)
        await _tree(runtime, meta, root)
        console.print(root)
        return 0
    for entry, said in conversation(log.entries):
        for message in said:
            for line in render_message(message):
                console.print(line)
        payload = entry.payload
        if isinstance(payload, CompactionEntry):
            how = "summarized" if payload.method == "summary" else "left out of the view"
            tokens = f"~{payload.tokens_before} → ~{payload.tokens_after} tokens"
            console.print(Text(f"── compacted: earlier messages {how} ({tokens}) ──", style="dim"))
    held = log.held_calls()
    for call in log.parked():
        decision = log.decision(call.id)
        request = log.request(call.id)
        reason = request.reason if request is not None else None
        if call.id in held:
            # Its child's escalated calls, shown below, are what it waits on.
            state = f"waiting on {visible(held[call.id][:8])}, whose calls await approval:"
            reason = None
        elif decision is None:
            state = "awaiting approval:"
        else:
            state = f"{'approved' if decision.approved else 'denied'}, awaiting resume:"
        console.print(Text(state, style="bold yellow"))
        console.print(approval_block(call.name, call.id, call.arguments, reason))
        if decision is None and call.id not in held:
            console.print(decide_line(meta.id, call.id, store_flags), crop=False)
    for child_id, escalated in log.escalated.items():
        try:
            _, child_log = await _log(runtime, child_id)
        except SessionNotFound:
            continue  # a deleted child's calls wait for nobody
        for call in child_log.parked():
            request = child_log.request(call.id)
            if child_log.decision(call.id) is not None or request is None:
                continue
            who = f"{visible(escalated.name)} {visible(child_id[:8])}"
            console.print(Text(f"awaiting approval, escalated by {who}:", style="bold yellow"))
            console.print(approval_block(call.name, call.id, call.arguments, request.reason))
            console.print(decide_line(meta.id, call.id, store_flags), crop=False)
    for question in pending_inputs(log.entries):
        console.print(Text("awaiting an answer:", style="bold yellow"))
        console.print(question_block(question))
        answer = _answer_command(meta.id, question, where)
        console.print(command_line(f"  answer: {answer}"), crop=False)
    row = await summarize(runtime, meta)
    if row.interrupted_at is not None:
        console.print(Text(f"{_status(row)}: its run was cut off", style="bold yellow"))
        resume = shlex.join(["taskloom", "resume", meta.id, *where])
        if "--app" in where:
            console.print(command_line(f"  go on: {resume}"), crop=False)
        else:
            # Reading builds no agent: the command line that goes on names it.
            console.print(command_line(f"  go on: {resume} AGENT"), crop=False)
            console.print(Text(f"        {_AGENT}as the run that was cut off had them"))
    elif row.status == "running":
        console.print(Text("running: another live process runs it", style="bold yellow"))
    return 0


_AGENT = (
    "AGENT: --app MODULE:FACTORY, or --model PROVIDER:MODEL and a "
    "--tool MODULE:ATTRIBUTE per tool, "
)


def _answer_command(session_id: str, question: PendingInput, where: Sequence[str] = ()) -> str:
    fields = [f"--set {name}=..." for name in (question.schema or {}).get("properties") or {}]
    head = shlex.join(["taskloom", "answer", session_id, visible(question.id), *where])
    return " ".join([head, *fields]) + " (or --decline)"


def _no_runs(request: ModelRequest) -> str:
    raise UsageError("this session was opened to record a decision, not to run")


async def _approve(runtime: Runtime, console: Console, args: Approve) -> int:
    meta = await runtime.store.get(args.session_id)
    # Deciding needs the log, not the agent: one that can never run stands in,
    # unless the app has it (then a run the decision lets go on goes on here).
    agent = runtime.agents.get(meta.agent) if args.where.app else None
    stand_in = Agent(meta.agent or "cli", FunctionModel(_no_runs, name="decisions-only"))
    session = await runtime.open_session(meta.id, agent or stand_in)
    # Found before deciding: a child that goes on leaves the turn that asked.
    escalated = await _escalating_child(runtime, session.journal.log, args.call_id)
    queue = store_queue(runtime, args.where)
    if queue is not None and await QueueIfThere(queue).carries(meta.id):
        # The session runs on workers: a run this decision lets go on is theirs.
        runtime.queue = queue
    queued = False
    try:
        await (session.deny if args.deny else session.approve)(args.call_id, note=args.note)
        # A decision that resumed a child (or its parent) here runs it to its end first.
        await runtime.background.wait_kept()
        await session.journal.sync()
        log = session.journal.log
        if escalated is None and runtime.queue is not None and not log.undecided_calls():
            # The session runs on workers: one of them goes on with it.
            await runtime.queue.submit_run(
                meta.id, RunDemand.IF_NEEDED, reason="resume", options=None
            )
            queued = True
    finally:
        if queue is not None:
            await queue.close()
    log = session.journal.log
    verb = "denied" if args.deny else "approved"
    if escalated is not None:
        return await _report_escalated(runtime, console, args, log, meta.id, verb, *escalated)
    request = log.request(args.call_id)
    assert request is not None  # the decision above found it
    console.print(approval_block(request.name, args.call_id, dict(request.arguments)))
    console.print(Text(f"{verb} {visible(args.call_id)}", style="bold"))
    where = args.where.options()
    undecided = [c for c in log.parked() if log.decision(c.id) is None]
    for call in undecided:
        console.print(decide_line(meta.id, call.id, shlex.join(where)), crop=False)
    resume = shlex.join(["taskloom", "resume", meta.id, *where])
    if queued:
        console.print(Text(f"  session {meta.id} goes on: queued for a worker"))
    elif not undecided and meta.metadata.get(SERVED_KEY):
        console.print(Text(f"  session {meta.id} is a served task: its server goes on with it"))
    elif args.where.app:
        console.print(command_line(f"  then: {resume}"), crop=False)
    else:
        # Deciding builds no agent, so this command cannot know the agent's
        # options (and never takes them from the store, which is data).
        console.print(command_line(f"  then: {resume} AGENT"), crop=False)
        console.print(Text(f"        {_AGENT}as the run that parked printed them"))
    return 0


async def _escalating_child(
    runtime: Runtime, log: SessionLog, call_id: str
) -> tuple[str, str, RequestedCall] | None:
    """The child (id, name, the call's request) that escalated `call_id` to
    `log`'s session, if one did; decided calls count (a decision taken again)."""
    if log.request(call_id) is not None:
        return None
    for child_id, escalated in log.escalated.items():
        try:
            _, child_log = await _log(runtime, child_id)
        except SessionNotFound:
            continue
        for (_, asked), request in child_log.requests.items():
            if asked == call_id:
                return child_id, escalated.name, request
    return None


async def _report_escalated(
    runtime: Runtime,
    console: Console,
    args: Approve,
    root: SessionLog,
    root_id: str,
    verb: str,
    child_id: str,
    name: str,
    request: RequestedCall,
) -> int:
    """Say what deciding a child's call did and what happens next. Exit code
    0: the child went on (here, on the queue, or with the root, `root`'s log
    after the decision); 1: its parent's next run takes it up; 2: it failed."""
    console.print(approval_block(request.name, args.call_id, dict(request.arguments)))
    who = f"{visible(name)} {visible(child_id[:8])}"
    console.print(Text(f"{verb} {visible(args.call_id)} for {who}", style="bold"))
    where = args.where.options()
    _, child_log = await _log(runtime, child_id)
    undecided = child_log.undecided_calls()
    if undecided:
        for call in undecided:
            console.print(decide_line(root_id, call.id, shlex.join(where)), crop=False)
        console.print(Text("  the agent goes on once each of its calls is decided"))
        return 0
    handover = DecidedChildren.of(runtime).handover(child_id)
    if handover is None:
        # Decided before, and gone on since: whoever decided first went on with it.
        now = (await child_status(runtime, child_id)).value
        said = f"went on after the first decision; it is {now}"
    elif handover.where == "ended":
        said = "has ended: nothing waits for this decision"
    elif handover.where == "queue":
        said = f"goes on: handed to the work queue (job {handover.detail}) for a worker"
    elif handover.where == "here" and handover.error is None:
        ran = handover.status
        said = "is run on by another live process" if ran is None else f"went on here: {ran.value}"
    elif handover.where == "parent":
        went_on = root.finished_result(root_id) if not root.parked() else None
        if went_on is not None:
            # Resumed by this decision (or another, or a worker): the child, then the root.
            now = "running in another process" if root.run_open else went_on.status.value
            console.print(Text(f"  {who} went on, then session {root_id}: {now}"), soft_wrap=True)
        elif runtime.queue is not None:
            queued = f"  session {root_id} goes on: queued for a worker, which runs {who} on"
            console.print(Text(queued), soft_wrap=True)
        else:
            resume = shlex.join(["taskloom", "resume", root_id, *where])
            console.print(
                Text(f"  session {root_id} is parked on {who}: resuming it runs {who} on")
            )
            agent = "" if args.where.app else " AGENT (--app MODULE:FACTORY, or --model and --tool)"
            console.print(command_line(f"  then: {resume}{agent}"), crop=False)
        return 0
    else:
        if handover.where == "here":
            failed = f"  going on with {who} here failed: {visible(str(handover.error))}"
            console.print(Text(failed, style="red"), soft_wrap=True)
        else:
            cannot = f"cannot run it ({visible(handover.detail)}), and no work queue carries it"
            stuck = Text(f"  {who} did not go on: this command {cannot}", style="yellow")
            console.print(stuck, soft_wrap=True)
        console.print(Text(_next_run(root_id, args.call_id)), soft_wrap=True)
        return EXIT_FAILED if handover.where == "here" else 1
    console.print(Text(f"  {who} {said}"))
    return 0


def _next_run(root_id: str, call_id: str) -> str:
    again = shlex.join(
        ["taskloom", "approve", root_id, visible(call_id), "--app", "MODULE:FACTORY"]
    )
    return (
        f"  it goes on at the next run of session {root_id}, in a process that has its "
        f"tools (or now: {again}, with an app that has them)"
    )


async def _answer(runtime: Runtime, console: Console, args: Answer) -> int:
    meta = await runtime.store.get(args.session_id)
    stand_in = Agent(meta.agent or "cli", FunctionModel(_no_runs, name="answers-only"))
    session = await runtime.open_session(meta.id, stand_in)
    asked = {q.id: q for q in await session.pending_input()}
    question = asked.get(args.input_id)
    action = "decline" if args.decline else "cancel" if args.cancel else "accept"
    given = action == "accept" and (args.json is not None or args.set)
    content = _content(args, question) if given else None
    await session.answer(args.input_id, content, action=action)
    if question is not None:
        console.print(question_block(question))
    console.print(Text(f"answered {visible(args.input_id)}: {action}", style="bold"))
    where = args.where.options()
    for other in asked.values():
        if other.id != args.input_id:
            console.print(
                command_line(f"  answer: {_answer_command(meta.id, other, where)}"), crop=False
            )
    return 0


def _content(args: Answer, question: PendingInput | None) -> dict[str, Any]:
    content: dict[str, Any] = {}
    if args.json is not None:
        try:
            given = json.loads(args.json)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--json is not JSON: {exc}") from None
        if not isinstance(given, dict):
            raise UsageError("--json must be a JSON object of the answer's fields")
        content.update(given)
    properties = ((question.schema if question else None) or {}).get("properties") or {}
    for item in args.set:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--set takes NAME=VALUE, not {item!r}")
        content[name] = _typed(text, (properties.get(name) or {}).get("type"))
    return content


def _typed(text: str, kind: object) -> Any:
    # The answer's check says what is wrong with a value of the wrong type.
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            return float(text)
    except ValueError:
        return text
    if kind == "boolean" and text.lower() in ("true", "false", "yes", "no"):
        return text.lower() in ("true", "yes")
    return text


async def _resume(runtime: Runtime, console: Console, args: Resume) -> int:
    meta = await runtime.store.get(args.session_id)
    agent = command_line_agent(args.where, args.flags, runtime, meta, "resume")
    session = await runtime.open_session(meta.id, agent)
    log = session.journal.log
    if not log.parked() and not log.run_open and not await _left_work(runtime, meta.id):
        status = (await summarize(runtime, meta)).status
        again = shlex.join(["taskloom", "run", "--session", meta.id])
        raise with_hint(
            UsageError(
                f"session {meta.id} has nothing to go on with: "
                f"no turn is parked and its last run ended ({status})"
            ),
            f"give it a new prompt: {again} {agent_flags(args.where, args.flags)} 'PROMPT'",
        )
    approved = [c for c in log.parked() if (d := log.decision(c.id)) is not None and d.approved]
    # The agent's toolsets (MCP servers) offer tools too: read them first.
    offered = SessionTools(runtime, agent)
    await offered.refresh_tools()
    missing = sorted({c.name for c in approved} - set(offered.tools))
    if missing:
        names = ", ".join(repr(visible(n)) for n in missing)
        raise with_hint(
            UsageError(f"the approved calls of session {meta.id} need the tool(s) {names}"),
            "add a --tool module:attribute for each, or use --app module:factory",
        )
    printer = EventPrinter(console, Waiting.on_stderr())
    options = args.flags.run_options()
    if log.parked():
        first = session.resume(options=options, emit=printer)
    else:
        # The last run, or work it left, was cut off (a crash, Ctrl-C): run
        # on from the log; the run takes the work up.
        first = session.run(None, options=options, emit=printer)
    # What the run takes up (a background child of the crashed run) is waited
    # for and its report taken, as `taskloom run` does.
    where = args.where.options()
    run = run_settled(session, first, options=options, emit=printer, where=where)
    # Cancelled, the run is cut off: resuming goes on with it again.
    go_on = f"taskloom resume {meta.id} {agent_flags(args.where, args.flags)}"
    result = await interruptible(run, go_on, printer)
    return report_result(console, session, result, args.where, args.flags)


async def _left_work(runtime: Runtime, session_id: str) -> bool:
    """Whether a child was cut off (its process died): the next run takes it up."""
    children = await runtime.store.list(parent_id=session_id, limit=CHILDREN_LOOKED_AT)
    for child in children:
        if await child_status(runtime, child.id) is ChildStatus.INTERRUPTED:
            return True
    return False


async def _fork(runtime: Runtime, console: Console, args: Fork) -> int:
    meta = await fork_session(runtime.store, args.session_id, args.at, round=args.round)
    # The id alone on stdout, so `$(taskloom sessions fork ...)` captures it.
    print(meta.id)
    return 0


async def _diff(runtime: Runtime, console: Console, args: Diff) -> int:
    store = runtime.store
    a = await store.get(args.a)
    b = await store.get(args.b)
    found = diff_sessions(await store.load(a.id), await store.load(b.id), a_id=a.id, b_id=b.id)
    if args.json:
        print(to_json(found.to_dict()))
    else:
        for line in found.render().splitlines():
            console.print(Text(visible(line)), soft_wrap=True)
    # Like diff(1): 0 when the same, 1 when they differ.
    return 0 if found.identical else 1


async def _dispatch(args: Command, console: Console) -> int:
    # Each of these needs sessions that are already stored: none makes a store.
    flags = args.flags if isinstance(args, Resume) else None
    async with await open_runtime(args.where, flags, create=False) as runtime:
        acts: dict[type, Callable[[Runtime, Console, Any], Awaitable[int]]] = {
            ListSessions: _list,
            Show: _show,
            Fork: _fork,
            Diff: _diff,
            Approve: _approve,
            Answer: _answer,
            Resume: _resume,
        }
        return await acts[type(args)](runtime, console, args)


def dispatch(args: Command) -> int:
    """Run one of the session commands; returns the exit code."""
    return asyncio.run(_dispatch(args, terminal()))
