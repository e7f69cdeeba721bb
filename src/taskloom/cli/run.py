"""`taskloom run`: one prompt against a real model, streamed to the terminal."""

from __future__ import annotations

import argparse
import asyncio
import importlib
from typing import Any

from rich.console import Console

from ..agent import Agent
from ..errors import ConfigurationError
from ..loop.options import RunOptions
from ..runtime import Runtime
from ..tools import Tool, as_tool
from . import default_store_url
from .render import EventPrinter, usage_table

__all__ = ["load_tool", "run_prompt"]


def load_tool(ref: str) -> Tool:
    """A tool from `module:attribute` (a Tool or a plain function)."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not attr:
        raise ConfigurationError(f"--tool takes module:attribute, got {ref!r}")
    try:
        obj: Any = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load tool {ref!r}: {exc}") from exc
    return as_tool(obj)


async def _run(args: argparse.Namespace, console: Console) -> int:
    from ..models import resolve_model

    options: dict[str, Any] = {}
    if args.base_url:
        options["base_url"] = args.base_url
    model = resolve_model(args.model, **options)
    agent = Agent("cli", model, args.system, [load_tool(t) for t in args.tool])
    async with Runtime(store=args.store or default_store_url()) as runtime:
        runtime.register_model(model)
        # What `taskloom resume` needs to rebuild the agent in another process.
        recorded = {"model": model.spec, "tools": list(args.tool), "system": args.system}
        session = await runtime.create_session(agent, metadata=recorded)
        printer = EventPrinter(console)
        result = await session.run(
            args.prompt, options=RunOptions(max_rounds=args.max_rounds), emit=printer
        )
        console.print(usage_table(result, title=f"session {session.id}"), style="dim")
        for call in result.pending:
            console.print(
                f"awaiting approval: {call.name} — run: taskloom approve {session.id} {call.id} "
                f"(or add --deny), then: taskloom resume {session.id}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        return 0 if result.ok else 1


def run_prompt(args: argparse.Namespace) -> int:
    """Run `args.prompt` on `args.model`; exit code 0 when the run completed."""
    return asyncio.run(_run(args, Console()))
