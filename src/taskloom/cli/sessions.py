"""`taskloom sessions list|show`, `taskloom approve`, `taskloom resume`.

They work on the embedded store by default (`--store` for another), from any
process: everything they need is in the session's log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from ..agent import Agent
from ..delegation.children import child_status
from ..errors import TaskloomError
from ..loop.options import RunOptions
from ..messages import Message
from ..runtime import Runtime
from ..stores.base import SessionMeta
from . import default_store_url
from .render import EventPrinter, usage_table
from .run import load_tool

__all__ = ["dispatch", "render_message", "session_agent"]


def _fold(text: str, limit: int = 160) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def render_message(message: Message) -> list[Text]:
    """A message as folded lines: text in full, tool calls and results on one line each."""
    lines: list[Text] = []
    prefix = f"[{message.origin}] " if message.origin else ""
    style = {"user": "bold cyan", "assistant": "bold green", "tool": "bold magenta"}[message.role]
    if message.text:
        lines.append(Text.assemble((f"{prefix}{message.role}: ", style), message.text))
    for call in message.tool_calls:
        args = _fold(json.dumps(call.arguments, ensure_ascii=False), 100)
        lines.append(
            Text.assemble(
                (f"{prefix}  → ", style), f"{call.name}({args})  ", (f"[{call.id}]", "dim")
            )
        )
    for result in message.results:
        mark = ("✗", "red") if result.is_error else ("✓", "green")
        lines.append(
            Text.assemble(
                (f"{prefix}  {mark[0]} ", mark[1]), f"{result.tool_name}: {_fold(result.content)}"
            )
        )
    return lines


def session_agent(
    meta: SessionMeta, *, model: str | None = None, tools: list[str] | None = None
) -> Agent:
    """The agent to continue a session with: CLI options, else what `taskloom run` recorded."""
    md = meta.metadata
    spec = model or md.get("model") or "openai:gpt-4.1-mini"
    refs = tools if tools else list(md.get("tools") or [])
    return Agent(meta.agent or "cli", spec, md.get("system"), [load_tool(t) for t in refs])


async def _list(runtime: Runtime, console: Console, limit: int) -> int:
    metas = await runtime.store.list(limit=limit)
    if not metas:
        console.print("no sessions")
        return 0
    for meta in metas:
        when = datetime.fromtimestamp(meta.created_at).strftime("%Y-%m-%d %H:%M:%S")
        parent = f" (child of {meta.parent_id[:8]})" if meta.parent_id else ""
        console.print(f"{meta.id}  {when}  {meta.agent}{parent}")
    return 0


async def _tree(runtime: Runtime, meta: SessionMeta, node: Tree) -> None:
    for child in reversed(await runtime.store.list(parent_id=meta.id)):
        status = await child_status(runtime, child.id)
        md = child.metadata
        label = Text.assemble(
            (str(md.get("name", child.agent)), "bold"),
            f" {child.id[:8]} ",
            (f"[{status.value}]", "green" if status.value == "done" else "yellow"),
            f" {md.get('mode', 'inline')}: {_fold(str(md.get('task', '')), 70)}",
        )
        await _tree(runtime, child, node.add(label))


async def _show(runtime: Runtime, console: Console, session_id: str, tree: bool) -> int:
    meta = await runtime.store.get(session_id)
    session = await runtime.open_session(session_id, session_agent(meta))
    if tree:
        root = Tree(Text.assemble((meta.agent or "session", "bold"), f" {meta.id[:8]}"))
        await _tree(runtime, meta, root)
        console.print(root)
        return 0
    for message in await session.transcript(include_children=False):
        for line in render_message(message):
            console.print(line)
    parked = session.log.parked()
    if parked:
        console.print(
            Text(
                "awaiting approval: " + ", ".join(f"{c.name} [{c.id}]" for c in parked),
                style="bold yellow",
            )
        )
    return 0


async def _approve(runtime: Runtime, console: Console, args: argparse.Namespace) -> int:
    meta = await runtime.store.get(args.session_id)
    session = await runtime.open_session(args.session_id, session_agent(meta))
    if args.deny:
        await session.deny(args.call_id, note=args.note)
        console.print(f"denied {args.call_id}")
    else:
        await session.approve(args.call_id, note=args.note)
        console.print(f"approved {args.call_id}")
    return 0


async def _resume(runtime: Runtime, console: Console, args: argparse.Namespace) -> int:
    meta = await runtime.store.get(args.session_id)
    session = await runtime.open_session(
        args.session_id, session_agent(meta, model=args.model, tools=args.tool)
    )
    result = await session.resume(options=RunOptions(max_rounds=20), emit=EventPrinter(console))
    console.print(usage_table(result, title=f"session {session.id}"), style="dim")
    return 0 if result.ok else 1


async def _dispatch(args: argparse.Namespace, console: Console) -> int:
    async with Runtime(store=args.store or default_store_url()) as runtime:
        if args.command == "sessions":
            if args.action == "list":
                return await _list(runtime, console, args.limit)
            return await _show(runtime, console, args.session_id, args.tree)
        if args.command == "approve":
            return await _approve(runtime, console, args)
        if args.command == "resume":
            return await _resume(runtime, console, args)
    raise TaskloomError(f"unknown command {args.command!r}")


def dispatch(args: argparse.Namespace) -> int:
    """Run one of the session commands; returns the exit code."""
    result: Any = asyncio.run(_dispatch(args, Console()))
    return int(result)
