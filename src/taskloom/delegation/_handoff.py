"""Subagent calls whose child runs in a task: hand-offs and questions.

A `SubAgent` with `background_after` or `ask_parent` runs its child in a
task the background service owns, under the child's lease, registered under
the parent like any background child. The call answers with whichever comes
first: the child's end, its question, or, after `background_after` seconds,
that it still runs. A child that ends with no call waiting reports to the
parent's inbox, once; if the process dies, the parent's next run takes it up.

A child's question is a notice in the parent's inbox (`<child>:ask:<call>`),
the answer one in the child's (`<child>:reply:<call>`), read and acknowledged
by the child's waiting `ask_parent` call, so both hold across processes. An
inline delegation returns the question as its result; a background child's
reaches the parent as a notice. The parent answers with the subagent's tool
(`child=`, `reply=`), and that call waits on the child the same way.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..backends import BackgroundNotice, NoticeStatus
from ..background import BackgroundService
from ..entries import MessageEntry, SubagentDispatched
from ..errors import SessionBusy
from ..events import Event, origin_label
from ..loop import RunOptions
from ..messages import ToolCall
from ..runtime import Runtime
from ..tools import Tool, ToolContext, ToolEffect, ToolError, ToolOutput, UnboundTool, tool
from ._children import (
    CHILD_LEASE,
    DEFAULT_MAX_ANSWER_CHARS,
    ChildOutcome,
    ChildStatus,
    all_decided,
    cap_answer,
    child_slot,
    child_started,
    create_child,
    hold_turn,
    read_on,
    report_inline,
    report_moved,
)
from ._dispatch import ChildSpec, ChildWorker, registration, report_notice_id

if TYPE_CHECKING:
    from ._subagent import SubAgent

ASK_TOOL = "ask_parent"

POLL = 0.2
"""Seconds between looks at the child's inbox while it waits for an answer."""


def reply_notice_id(child_id: str, call_id: str) -> str:
    """The id of the parent's answer in the child's inbox."""
    return f"{child_id}:reply:{call_id}"


class Questions:
    """The questions children of this runtime asked and wait on, as in-process
    signals for inline delegations (the questions themselves are in the store),
    and the children of this runtime running in tasks."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.running: dict[str, _Child] = {}
        """The children running in tasks of this process, by id."""
        self.asked: dict[str, asyncio.Queue[tuple[str, str, str]]] = {}
        """Where questions of a child asked in this process arrive, by child id,
        as (question, its id, the id of its notice in the parent's inbox)."""

    @classmethod
    def of(cls, runtime: Runtime) -> Questions:
        """The runtime's instance."""
        return runtime.service(cls, cls)

    async def ask(
        self,
        ctx: ToolContext,
        question: str,
        timeout: float,
        limit: int = DEFAULT_MAX_ANSWER_CHARS,
    ) -> str:
        """Put the child's question to its parent (at most `limit` characters of it,
        and how to read on) and wait for the answer."""
        runtime = self.runtime
        meta = await runtime.store.get(ctx.session_id)
        if meta.parent_id is None:
            raise ToolError("ask_parent: this agent has no parent to ask")
        name = str(meta.metadata.get("name") or meta.agent)
        role = str(meta.metadata.get("role") or name)
        background = BackgroundService.of(runtime)
        shown = cap_answer(question, limit, read_on(ctx.session_id, limit, ctx.call_id))
        text = (
            f"agent {name!r} ({ctx.session_id[:8]}) asks: {shown}\n"
            f"Answer it with {role}(child={ctx.session_id!r}, question={ctx.call_id!r}, "
            "reply=...)."
        )
        notice = BackgroundNotice(
            f"{ctx.session_id}:ask:{ctx.call_id}",
            f"{ctx.session_id}:ask",
            "question",
            text,
            NoticeStatus.ASKED,
            time.time(),
            {"child_session_id": ctx.session_id, "question": shown, "call_id": ctx.call_id},
        )
        await background.inbox.push(meta.parent_id, notice)
        watching = self.asked.get(ctx.session_id)
        if watching is not None:
            watching.put_nowait((question, ctx.call_id, notice.id))
        answer = await self._answer(ctx, background, timeout)
        if answer is None:
            # Unanswered: the question is withdrawn, so the parent is not shown
            # it later, and a late reply to it is refused (see `reply`).
            await background.inbox.ack(meta.parent_id, [notice.id])
            if ctx.stop.is_set:
                return "Your run is stopping; no answer came."
            return f"Your parent did not answer within {timeout:g} s; go on without it."
        return answer

    async def _answer(
        self, ctx: ToolContext, background: BackgroundService, timeout: float
    ) -> str | None:
        wanted = reply_notice_id(ctx.session_id, ctx.call_id)
        ends = time.monotonic() + timeout
        while True:
            for notice in await background.inbox.pending(ctx.session_id):
                if notice.id == wanted:
                    await background.inbox.ack(ctx.session_id, [wanted])
                    return f"Your parent answers: {notice.text}"
            left = ends - time.monotonic()
            if ctx.stop.is_set or left <= 0:
                return None
            await asyncio.sleep(min(POLL, left))

    async def reply(
        self, ctx: ToolContext, child_id: str, answer: str, question: str | None = None
    ) -> str:
        """Send the parent's answer to the question `question` (its id) of
        `child_id`, or without an id to the one question the child waits on
        (an error when several wait); the id of the question answered."""
        runtime = self.runtime
        try:
            meta = await runtime.store.get(child_id)
        except Exception:
            raise ToolError(f"no agent {child_id!r} of yours is waiting for an answer") from None
        if meta.parent_id != ctx.session_id:
            raise ToolError(f"agent {child_id!r} is not one of yours")
        waiting = _open_questions(await runtime.store.load(child_id))
        if question is not None:
            call = next((c for c in waiting if c.id == question), None)
            if call is None:
                raise ToolError(
                    f"agent {child_id[:8]} no longer waits on question {question!r} "
                    "(answered, or given up on)"
                )
        elif len(waiting) == 1:
            call = waiting[0]
        elif waiting:
            ids = ", ".join(repr(c.id) for c in waiting)
            raise ToolError(f"agent {child_id[:8]} waits on several questions ({ids}): name one")
        else:
            raise ToolError(f"agent {child_id[:8]} has no question waiting for an answer")
        notice = BackgroundNotice(
            reply_notice_id(child_id, call.id),
            f"{child_id}:reply",
            "answer",
            answer,
            "answered",
            time.time(),
        )
        await BackgroundService.of(runtime).inbox.push(child_id, notice)
        asked = self.asked.get(child_id)
        if asked is not None:
            # Answered now: a call that waits on the child must not be given
            # it again before the child reads the answer.
            queued = [asked.get_nowait() for _ in range(asked.qsize())]
            for item in queued:
                if item[1] != call.id:
                    asked.put_nowait(item)
        return call.id


def _open_questions(entries: list[Any]) -> list[ToolCall]:
    """The child's `ask_parent` calls still waiting for their result."""
    asking: list[ToolCall] = []
    answered: set[str] = set()
    for entry in entries:
        payload = entry.payload
        if not isinstance(payload, MessageEntry):
            continue
        message = payload.message
        asking.extend(c for c in message.tool_calls if c.name == ASK_TOOL)
        answered.update(r.tool_call_id for r in message.results)
    return [c for c in asking if c.id not in answered]


@tool(name=ASK_TOOL, effect=ToolEffect.READ_ONLY)
async def _ask_parent(
    timeout: float, limit: int, questions: Questions, /, question: str, ctx: ToolContext
) -> str:
    """Ask the agent that gave you this task a question, and wait for its
    answer. Ask only what you cannot find out yourself.

    Args:
        question: The question, complete: the parent sees nothing else of your work.
    """
    return await questions.ask(ctx, question, timeout, limit)


def ask_parent_tool(timeout: float, limit: int = DEFAULT_MAX_ANSWER_CHARS) -> Tool:
    """The `ask_parent` tool of a subagent's child, bound to its runtime's `Questions`;
    the parent is shown at most `limit` characters of a question at once."""
    return UnboundTool(_ask_parent.partial(timeout, limit), Questions.of)


_REGISTRATION = CHILD_LEASE * 10
"""Seconds a child's registration lives without renewal, as a background child's."""


@dataclass(slots=True)
class _Child:
    """A child running in a task of this process, and who waits on it."""

    sub: SubAgent
    task_text: str
    spec: ChildSpec
    running: asyncio.Task[ChildOutcome]
    questions: asyncio.Queue[tuple[str, str, str]]
    # True while a tool call waits on the child: it, not a notice, reports the end.
    waiting: bool = False
    relay: list[Callable[[Event], None] | None] = field(default_factory=lambda: [None])


async def delegate_in_task(
    sub: SubAgent,
    runtime: Runtime,
    ctx: ToolContext,
    task: str,
    name: str,
    *,
    child_id: str | None = None,
) -> ToolOutput:
    """Start the subagent's child in a task on `runtime` and wait on it; with
    `child_id`, take up the child an earlier run of this call started."""
    background = runtime.background
    fresh = child_id is None
    if child_id is None:
        child_id = uuid.uuid4().hex
        agent, tree = sub.agent, ctx.controls.tree
        spec = ChildSpec(
            child_session_id=child_id,
            parent_session_id=ctx.session_id,
            name=name,
            task=task,
            instructions=agent.instructions,
            tools=tuple(t.name for t in agent.tools),
            model=agent.model if isinstance(agent.model, str | None) else agent.model.spec,
            type=sub.name,
            max_rounds=sub.max_rounds,
            parent_run_id=ctx.run_id,
            budget=tree.to_dict() if tree is not None else None,
            on_approval=sub.on_approval,
            max_answer_chars=sub.max_answer_chars,
        )
    else:
        entries = await runtime.store.load(child_id)
        spec = next(
            ChildSpec.from_dict(e.payload.spec)
            for e in entries
            if isinstance(e.payload, SubagentDispatched)
        )
    registered = registration(child_id, spec.name, spec.task, ctx.run_id)
    await background.registry.add(ctx.session_id, registered, _REGISTRATION)
    if not fresh:
        return await _run_and_wait(sub, runtime, ctx, spec, False)
    try:
        await create_child(
            runtime,
            ctx,
            sub.agent,
            name=name,
            task=task,
            mode="inline",
            role=sub.name,
            spec=spec.to_dict(),
            session_id=child_id,
        )
    except BaseException:
        await background.lifecycle.discard(ctx.session_id, child_id)
        raise
    return await _run_and_wait(sub, runtime, ctx, spec, True)


async def _run_and_wait(
    sub: SubAgent,
    runtime: Runtime,
    ctx: ToolContext,
    spec: ChildSpec,
    fresh: bool,
) -> ToolOutput:
    """Run the child (new, or on from its log) in a task and wait on it."""
    background = runtime.background
    child_id, name = spec.child_session_id, spec.name
    options = RunOptions.for_child(ctx.controls, max_rounds=sub.max_rounds)
    questions = Questions.of(runtime)

    def emit(event: Event) -> None:
        target = state.relay[0]
        if target is not None:
            target(event)

    async def run() -> ChildOutcome:
        try:
            outcome = await ChildWorker(runtime).take_up(
                spec,
                agent=sub.agent,
                # A child taken up again may still be held for a moment by
                # whoever parked it.
                wait=False if fresh else CHILD_LEASE,
                options=options,
                emit=emit,
                origin=origin_label(name, child_id, ctx.origin),
                slot=child_slot(runtime, ctx),
                go_on=False,
            )
        finally:
            questions.running.pop(child_id, None)
            questions.asked.pop(child_id, None)
        if outcome is None:
            raise SessionBusy(child_id)  # taken over, or run by a live holder elsewhere
        if outcome.status is ChildStatus.AWAITING_APPROVAL and await all_decided(runtime, child_id):
            # Decided while this still held the child's lease (the decision's
            # resume found it busy): go on here; its end reaches the inbox.
            await ChildWorker(runtime).run(spec, agent=sub.agent)
            return outcome
        # No await between this check and the return: a call waiting now
        # gets the outcome from the task; otherwise the parent's inbox does.
        if not state.waiting and outcome.status.is_terminal:
            await ChildWorker(runtime).report(spec, outcome)
        return outcome

    child_started(ctx, child_id, name, spec.task)
    state = _Child(
        sub,
        spec.task,
        spec,
        background.keep(run()),
        questions.asked.setdefault(child_id, asyncio.Queue()),
    )
    questions.running[child_id] = state
    return await _wait_on(runtime, ctx, state)


async def reply_to_child(
    sub: SubAgent,
    runtime: Runtime,
    ctx: ToolContext,
    child_id: str,
    answer: str,
    question: str | None = None,
) -> ToolOutput:
    """Answer the question child `child_id` waits on; wait on it again if it runs here."""
    questions = Questions.of(runtime)
    await questions.reply(ctx, child_id, answer, question)
    state = questions.running.get(child_id)
    if state is None:
        note = "Answer sent; the agent runs elsewhere, and its report arrives as a notice later."
        return ToolOutput(json.dumps({"child": child_id, "status": "answered", "note": note}))
    if state.waiting:
        raise ToolError(f"another call already waits on agent {child_id[:8]}")
    return await _wait_on(runtime, ctx, state)


async def _wait_on(runtime: Runtime, ctx: ToolContext, state: _Child) -> ToolOutput:
    background = runtime.background
    child_id = state.spec.child_session_id
    sub = state.sub
    state.waiting = True
    state.relay[0] = ctx.emit
    clock = asyncio.get_running_loop()
    after = sub.background_after
    ends = None if after is None else clock.time() + after
    try:
        while True:
            asked = asyncio.ensure_future(state.questions.get())
            try:
                # A child that ends while this waits is in `done` (asyncio.wait
                # sorts after it wakes), so its end is reported here.
                done, _ = await asyncio.wait(
                    {state.running, asked},
                    timeout=None if ends is None else max(ends - clock.time(), 0.0),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                if not asked.done():
                    asked.cancel()
            if asked in done and state.running not in done:
                _, question_id, _ = asked.result()
                waiting = _open_questions(await runtime.store.load(child_id))
                if all(c.id != question_id for c in waiting):
                    continue  # answered meanwhile, or given up on
            break
    except asyncio.CancelledError:
        # The parent's call was cancelled while it waited: so is its child.
        state.running.cancel()
        await asyncio.gather(state.running, return_exceptions=True)
        await background.lifecycle.discard(ctx.session_id, child_id)
        raise
    finally:
        state.waiting = False
    if state.running in done:
        outcome = state.running.result()
        if outcome.status is ChildStatus.AWAITING_APPROVAL:
            await background.lifecycle.discard(ctx.session_id, child_id)
            if not await all_decided(runtime, child_id):
                # An inline escalation: the parent's turn parks on this call
                # (this result is never committed), and its resume runs the
                # call again, which takes the child up once decided.
                await hold_turn(runtime, ctx, child_id, state.spec.name)
                return _awaiting(child_id, state.spec.name, held=True)
            return _awaiting(child_id, state.spec.name)
        notices = background.notices_for(ctx.run_id)
        if notices is not None:
            # Reported to the inbox too, and marked seen: acknowledged once
            # this call's result is stored, delivered if a crash comes first.
            await ChildWorker(runtime).report(state.spec, outcome)
            notices.mark_seen(report_notice_id(child_id))
        else:
            await background.lifecycle.discard(ctx.session_id, child_id)
        await report_inline(ctx, outcome, role=sub.name, task=state.task_text)
        return outcome.to_tool_output(sub.max_answer_chars)
    # The call answers before the child ends: from here the child's events
    # go to the runtime's subscribers, and its end to the parent's inbox.
    state.relay[0] = background.emit
    notices = background.notices_for(ctx.run_id)
    if asked in done:
        question, question_id, notice_id = asked.result()
        if notices is not None:
            # Shown here, in band: not delivered again as a notice.
            notices.mark_seen(notice_id)
        limit = sub.max_answer_chars
        body = {
            # The whole question stays in the child's log (its ask_parent call).
            "question": cap_answer(question, limit, read_on(child_id, limit, question_id)),
            "child": child_id,
            "question_id": question_id,
            "note": (
                f"Answer with {sub.name}(child={child_id!r}, question={question_id!r}, reply=...)."
            ),
        }
        return ToolOutput(json.dumps(body, ensure_ascii=False))
    if notices is not None:
        notices.mark_started(child_id)
    await report_moved(ctx, child_id, role=sub.name, task=state.task_text)
    receipt: dict[str, Any] = {
        "id": child_id,
        "name": state.spec.name,
        "status": "running",
        "note": (
            f"Still running after {sub.background_after:g} s, so it goes on in the "
            "background; its answer arrives as a notice at a later round."
        ),
    }
    return ToolOutput(json.dumps(receipt))


def _awaiting(child_id: str, name: str, *, held: bool = False) -> ToolOutput:
    note = (
        # Shown in the call's events only: the parked turn never commits it.
        "It asked for approval of a call, which a person decides; the run parks until "
        "then, and resuming it runs the agent on."
        if held
        else "It asked for approval of a call, which a person decides; once decided, it "
        "goes on, and its answer arrives as a notice at a later round."
    )
    body = {"id": child_id, "name": name, "status": "awaiting_approval", "note": note}
    return ToolOutput(json.dumps(body))
