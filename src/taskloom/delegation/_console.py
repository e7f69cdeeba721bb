"""Console tools: a parent model's view of and control over its workers.

`list_agents`, `read_agent`, `steer_agent`, `stop_agent`. A worker is found by
its id, an id prefix of 8 or more characters, or its name (the latest spawn
with that name wins). Everything is read from the store, so workers in
another process are seen and controlled the same way. The runtime offering
the tools binds each to a `_Console` on itself.
"""

from __future__ import annotations

import asyncio
import time

from ..backends import SessionMeta
from ..entries import MessageEntry
from ..log import SessionLog
from ..messages import Message
from ..runtime import Runtime
from ..tools import Tool, ToolContext, ToolEffect, ToolError, UnboundTool, tool
from ._children import (
    ChildStatus,
    LiveChildren,
    cap_answer,
    check_answer_cap,
    child_status,
    kept_answer,
    read_on,
    report_text,
    summary,
    terminal_entry,
)
from ._dispatch import report_notice_id
from ._handoff import ASK_TOOL


def console_tools(
    *, wait_timeout: float = 120.0, poll_interval: float = 0.2, page_chars: int = 40_000
) -> list[Tool]:
    """The four console tools. `read_agent(wait=True)` waits at most
    `wait_timeout` seconds, polling the store every `poll_interval`;
    `read_agent(offset=...)` reads the rest of a long report (or, with
    `question=`, a question) at most `page_chars` characters at a time."""
    page_chars = check_answer_cap("console_tools", page_chars, "page_chars")

    def on(runtime: Runtime) -> _Console:
        return _Console(runtime, wait_timeout, poll_interval, page_chars)

    templates = (
        _Console.list_agents,
        _Console.read_agent,
        _Console.steer_agent,
        _Console.stop_agent,
    )
    return [UnboundTool(template, on) for template in templates]


def _render(message: Message) -> str:
    if message.role == "tool":
        return "\n".join(
            f"  result[{r.tool_name}]{' (error)' if r.is_error else ''}: {summary(r.content, 300)}"
            for r in message.results
        )
    parts = []
    if message.text:
        parts.append(f"{message.role}: {message.text}")
    for call in message.tool_calls:
        parts.append(f"{message.role} calls {call.name}({summary(str(call.arguments), 200)})")
    return "\n".join(parts) or f"{message.role}: (empty)"


class _Console:
    """The console on one runtime; its methods taking `self` positionally are the tools."""

    def __init__(
        self, runtime: Runtime, wait_timeout: float, poll_interval: float, page: int
    ) -> None:
        self.runtime = runtime
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval
        self.page = page

    @tool(effect=ToolEffect.READ_ONLY)
    async def list_agents(self, /, ctx: ToolContext) -> str:
        """List the agents you started, newest first, with their status."""
        children = await self.runtime.store.list(parent_id=ctx.session_id)
        if not children:
            return "You have not started any agents."
        lines = []
        for meta in children:
            status = await child_status(self.runtime, meta.id)
            md = meta.metadata
            lines.append(
                f"{meta.id[:8]}  {md.get('name', '?')}  [{status.value}]  ({md.get('mode', 'inline')}, {md.get('role', '')})  "
                f"task: {summary(str(md.get('task', '')), 100)}"
            )
        return "\n".join(lines)

    @tool(effect=ToolEffect.READ_ONLY)
    async def read_agent(
        self,
        /,
        agent: str,
        ctx: ToolContext,
        tail: int = 20,
        wait: bool = False,
        offset: int = 0,
        question: str = "",
    ) -> str:
        """Read an agent's status, latest messages and report.

        Args:
            agent: the agent's id, id prefix (8+ characters) or name
            tail: how many of its latest messages to show
            wait: wait until it has finished (bounded; ends early if you are stopped)
            offset: read its report (or, with question, that question) from this character on
            question: the id of a question it asked you, to read from offset
        """
        runtime = self.runtime
        meta = await self._find(ctx.session_id, agent)
        if offset or question:
            return await self._read_on(meta, offset, question)
        status = await child_status(runtime, meta.id)
        if wait and not status.is_terminal:
            deadline = time.monotonic() + self.wait_timeout
            while not status.is_terminal and time.monotonic() < deadline and not ctx.stop.is_set:
                await asyncio.sleep(self.poll_interval)
                status = await child_status(runtime, meta.id)
        entries = await runtime.store.load(meta.id)
        log = SessionLog.folded(entries)
        shown = log.messages[-tail:] if tail > 0 else []
        head = f"agent {meta.metadata.get('name', '?')} ({meta.id[:8]}): {status.value}"
        if wait and not status.is_terminal:
            head += " (still running after waiting)"
        body = "\n".join(_render(m) for m in shown)
        end = terminal_entry(entries)
        if end is not None:
            if end.report is not None:
                report = report_text(end.report)
                report = cap_answer(report, self.page, read_on(meta.id, self.page))
                body += f"\nREPORT: {report}"
            if end.error:
                body += f"\nERROR: {end.error}"
            # The model now saw the report: a background child's notice need
            # not be delivered again (acked once this result is persisted).
            notices = runtime.background.notices_for(ctx.run_id)
            if notices is not None:
                notices.mark_seen(report_notice_id(meta.id))
        return f"{head}\n{body}".strip()

    async def _read_on(self, meta: SessionMeta, offset: int, question: str) -> str:
        """A page of the child's report or question, from character `offset`."""
        name = f"agent {meta.metadata.get('name', '?')} ({meta.id[:8]})"
        entries = await self.runtime.store.load(meta.id)
        if question:
            asked = [
                c.arguments.get("question")
                for e in entries
                if isinstance(e.payload, MessageEntry)
                for c in e.payload.message.tool_calls
                if c.id == question and c.name == ASK_TOOL
            ]
            if not asked:
                raise ToolError(f"{name} asked no question {question!r}")
            text, what = str(asked[0]), f"question {question!r}"
        else:
            # A remote agent's child keeps its whole answer before its report
            # (which holds the cut one) is written.
            kept = kept_answer(entries) if meta.metadata.get("mode") == "remote" else None
            end = terminal_entry(entries)
            if kept is None and (end is None or end.report is None):
                raise ToolError(f"{name} has no report to read")
            text = kept if kept is not None else report_text(end and end.report)
            what = "report"
        if not 0 <= offset < len(text):
            raise ToolError(
                f"offset must be from 0 to {len(text) - 1}: its {what} has {len(text)} characters"
            )
        end_at = min(len(text), offset + self.page)
        page = cap_answer(text[offset:], self.page, read_on(meta.id, end_at, question))
        return f"{name}, {what}, characters {offset} to {end_at} of {len(text)}:\n{page}"

    @tool
    async def steer_agent(self, /, agent: str, text: str, ctx: ToolContext) -> str:
        """Send a live agent a message; it reads it at its next round.

        Args:
            agent: the agent's id, id prefix (8+ characters) or name
            text: what to tell it
        """
        meta = await self._find(ctx.session_id, agent)
        status = await child_status(self.runtime, meta.id)
        if status.is_terminal or status is ChildStatus.INTERRUPTED:
            raise ToolError(f"agent {agent!r} is {status.value}; steering only reaches live agents")
        await self.runtime.steer(meta.id, text)
        return f"sent to {meta.metadata.get('name', meta.id[:8])}; it reads it at its next round"

    @tool
    async def stop_agent(self, /, agent: str, ctx: ToolContext) -> str:
        """Stop an agent at its next round boundary; you keep running.

        Args:
            agent: the agent's id, id prefix (8+ characters) or name
        """
        meta = await self._find(ctx.session_id, agent)
        status = await child_status(self.runtime, meta.id)
        if status.is_terminal:
            return f"agent {agent!r} already ended: {status.value}"
        signal = LiveChildren.of(self.runtime).stops.get(meta.id)
        if signal is not None:
            signal.set("stopped by its parent")
        # Through the log too: reaches a worker in another process.
        await self.runtime.request_stop(meta.id, "stopped by its parent")
        return f"stop requested for {meta.metadata.get('name', meta.id[:8])}; it ends at its next round boundary"

    async def _find(self, session_id: str, ref: str) -> SessionMeta:
        """The session's worker named by id, id prefix (8+ chars) or name; ToolError if none."""
        ref = ref.strip()
        children = await self.runtime.store.list(parent_id=session_id)  # newest first
        if exact := next((m for m in children if m.id == ref), None):
            return exact
        if len(ref) >= 8:
            matches = [m for m in children if m.id.startswith(ref)]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                raise ToolError(
                    f"id prefix {ref!r} matches {len(matches)} agents; give more characters"
                )
        if named := next((m for m in children if m.metadata.get("name") == ref), None):
            return named
        known = (
            ", ".join(f"{m.metadata.get('name', '?')} ({m.id[:8]})" for m in children) or "(none)"
        )
        raise ToolError(f"no agent {ref!r}; your agents: {known}")
