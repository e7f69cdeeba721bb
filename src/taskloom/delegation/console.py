"""Console tools: a parent model's view of and control over its workers.

`list_agents`, `read_agent`, `steer_agent`, `stop_agent`. A worker is found by
its id, an id prefix of 8 or more characters, or its name (the latest spawn
with that name wins). Everything is read from the store, so workers running
in another process are seen and controlled the same way.
"""

from __future__ import annotations

import asyncio
import time

from ..background import BackgroundService
from ..loop import SessionLog
from ..messages import Message
from ..stores import SessionMeta
from ..tools import Tool, ToolContext, ToolEffect, ToolError, tool
from .children import (
    ChildStatus,
    LiveChildren,
    child_status,
    host_agent,
    host_runtime,
    summary,
    terminal_entry,
)
from .dispatch import report_notice_id

__all__ = ["console_tools", "find_child"]


async def _children(ctx: ToolContext) -> list[SessionMeta]:
    return await host_runtime(ctx).store.list(parent_id=ctx.session_id)


async def find_child(ctx: ToolContext, ref: str) -> SessionMeta:
    """The caller's worker named by id, id prefix (8+ chars) or name; ToolError if none."""
    ref = ref.strip()
    children = await _children(ctx)  # newest first
    for meta in children:
        if meta.id == ref:
            return meta
    if len(ref) >= 8:
        matches = [m for m in children if m.id.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise ToolError(
                f"id prefix {ref!r} matches {len(matches)} agents; give more characters"
            )
    for meta in children:
        if meta.metadata.get("name") == ref:
            return meta
    known = ", ".join(f"{m.metadata.get('name', '?')} ({m.id[:8]})" for m in children) or "(none)"
    raise ToolError(f"no agent {ref!r}; your agents: {known}")


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


def console_tools(*, wait_timeout: float = 120.0, poll_interval: float = 0.2) -> list[Tool]:
    """The four console tools. `read_agent(wait=True)` waits at most
    `wait_timeout` seconds, polling the store every `poll_interval`."""

    @tool(effect=ToolEffect.READ_ONLY)
    async def list_agents(ctx: ToolContext) -> str:
        """List the agents you started, newest first, with their status."""
        children = await _children(ctx)
        if not children:
            return "You have not started any agents."
        lines = []
        for meta in children:
            status = await child_status(host_runtime(ctx), meta.id)
            md = meta.metadata
            lines.append(
                f"{meta.id[:8]}  {md.get('name', '?')}  [{status.value}]  ({md.get('mode', 'inline')}, {md.get('role', '')})  "
                f"task: {summary(str(md.get('task', '')), 100)}"
            )
        return "\n".join(lines)

    @tool(effect=ToolEffect.READ_ONLY)
    async def read_agent(agent: str, ctx: ToolContext, tail: int = 20, wait: bool = False) -> str:
        """Read an agent's status, latest messages and report.

        Args:
            agent: the agent's id, id prefix (8+ characters) or name
            tail: how many of its latest messages to show
            wait: wait until it has finished (bounded; ends early if you are stopped)
        """
        meta = await find_child(ctx, agent)
        status = await child_status(host_runtime(ctx), meta.id)
        if wait and not status.is_terminal:
            deadline = time.monotonic() + wait_timeout
            while not status.is_terminal and time.monotonic() < deadline and not ctx.stop.is_set:
                await asyncio.sleep(poll_interval)
                status = await child_status(host_runtime(ctx), meta.id)
        entries = await host_runtime(ctx).store.load(meta.id)
        log = SessionLog()
        for entry in entries:
            log.apply(entry)
        shown = log.messages[-tail:] if tail > 0 else []
        head = f"agent {meta.metadata.get('name', '?')} ({meta.id[:8]}): {status.value}"
        if wait and not status.is_terminal:
            head += " (still running after waiting)"
        body = "\n".join(_render(m) for m in shown)
        end = terminal_entry(entries)
        if end is not None:
            if end.report is not None:
                body += f"\nREPORT: {end.report}"
            if end.error:
                body += f"\nERROR: {end.error}"
            # The model now saw the report: a background child's notice need
            # not be delivered again (acked once this result is persisted).
            notices = BackgroundService.of(host_runtime(ctx)).notices_for(ctx.run_id)
            if notices is not None:
                notices.mark_seen(report_notice_id(meta.id))
        return f"{head}\n{body}".strip()

    @tool
    async def steer_agent(agent: str, text: str, ctx: ToolContext) -> str:
        """Send a live agent a message; it reads it at its next round.

        Args:
            agent: the agent's id, id prefix (8+ characters) or name
            text: what to tell it
        """
        meta = await find_child(ctx, agent)
        status = await child_status(host_runtime(ctx), meta.id)
        if status.is_terminal or status is ChildStatus.INTERRUPTED:
            raise ToolError(f"agent {agent!r} is {status.value}; steering only reaches live agents")
        child = await host_runtime(ctx).open_session(meta.id, host_agent(ctx))
        await child.steer(text)
        return f"sent to {meta.metadata.get('name', meta.id[:8])}; it reads it at its next round"

    @tool
    async def stop_agent(agent: str, ctx: ToolContext) -> str:
        """Stop an agent at its next round boundary; you keep running.

        Args:
            agent: the agent's id, id prefix (8+ characters) or name
        """
        meta = await find_child(ctx, agent)
        status = await child_status(host_runtime(ctx), meta.id)
        if status.is_terminal:
            return f"agent {agent!r} already ended: {status.value}"
        signal = LiveChildren.of(host_runtime(ctx)).stop_signal(meta.id)
        if signal is not None:
            signal.set("stopped by its parent")
        # Through the log too: reaches a worker in another process.
        child = await host_runtime(ctx).open_session(meta.id, host_agent(ctx))
        await child.request_stop("stopped by its parent")
        return f"stop requested for {meta.metadata.get('name', meta.id[:8])}; it ends at its next round boundary"

    return [list_agents, read_agent, steer_agent, stop_agent]
