"""Children that ask their parent: the `ask_parent` tool and the way back.

The question is a notice in the parent's inbox (`<child>:ask:<call>`), the
answer one in the child's (`<child>:reply:<call>`), read and acknowledged by
the child's waiting `ask_parent` call, so both hold across processes. An
inline delegation returns the question as its result; a background child's
reaches the parent as a notice. The parent answers with the subagent's tool
(`child=`, `reply=`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..background import BackgroundNotice, BackgroundService, NoticeStatus
from ..entries import MessageEntry
from ..messages import ToolCall
from ..runtime import Runtime
from ..tools import Tool, ToolContext, ToolEffect, ToolError, UnboundTool, tool
from ._children import DEFAULT_MAX_ANSWER_CHARS, cap_answer, read_on

__all__ = [
    "ASK_TOOL",
    "Questions",
    "ask_notice_id",
    "ask_parent_tool",
    "open_questions",
    "reply_notice_id",
]

ASK_TOOL = "ask_parent"

POLL = 0.2
"""Seconds between looks at the child's inbox while it waits for an answer."""


def ask_notice_id(child_id: str, call_id: str) -> str:
    """The id of a child's question in its parent's inbox."""
    return f"{child_id}:ask:{call_id}"


def reply_notice_id(child_id: str, call_id: str) -> str:
    """The id of the parent's answer in the child's inbox."""
    return f"{child_id}:reply:{call_id}"


class Questions:
    """The questions children of this runtime asked and wait on
    (`Questions.of(runtime)`): the in-process signal an inline delegation
    waits for; the questions themselves are in the store."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._asked: dict[str, asyncio.Queue[tuple[str, str, str]]] = {}

    @classmethod
    def of(cls, runtime: Runtime) -> Questions:
        """The runtime's instance."""
        return runtime.service(cls, cls)

    def watch(self, child_id: str) -> asyncio.Queue[tuple[str, str, str]]:
        """Where questions of `child_id` asked in this process arrive, as
        (question, its id, the id of its notice in the parent's inbox)."""
        return self._asked.setdefault(child_id, asyncio.Queue())

    def forget(self, child_id: str) -> None:
        """Stop watching `child_id`."""
        self._asked.pop(child_id, None)

    async def ask(
        self,
        ctx: ToolContext,
        question: str,
        timeout: float,
        limit: int = DEFAULT_MAX_ANSWER_CHARS,
    ) -> str:
        """Put the child's question to its parent and wait for the answer. The
        parent's inbox gets at most `limit` characters of it, and how to read
        on: the whole question stays in the child's log (this very call)."""
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
            ask_notice_id(ctx.session_id, ctx.call_id),
            f"{ctx.session_id}:ask",
            "question",
            text,
            NoticeStatus.ASKED,
            time.time(),
            {"child_session_id": ctx.session_id, "question": shown, "call_id": ctx.call_id},
        )
        await background.inbox.push(meta.parent_id, notice)
        watching = self._asked.get(ctx.session_id)
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
        asked = self._asked.get(child_id)
        if asked is not None:
            # Answered now: a call that waits on the child must not be given
            # it again before the child reads the answer.
            queued = [asked.get_nowait() for _ in range(asked.qsize())]
            for item in queued:
                if item[1] != call.id:
                    asked.put_nowait(item)
        return call.id


async def open_questions(runtime: Runtime, child_id: str) -> set[str]:
    """The ids of the questions `child_id` still waits on."""
    return {c.id for c in _open_questions(await runtime.store.load(child_id))}


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
    """The `ask_parent` tool a subagent's child gets (`SubAgent(ask_parent=True)`),
    bound by the runtime running the child to its `Questions`; the parent is
    shown at most `limit` characters of a question at once."""
    return UnboundTool(_ask_parent.partial(timeout, limit), Questions.of)
