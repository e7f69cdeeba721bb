"""The `taskloom` command.

Subcommands import what they need when they run, so `taskloom --help` and
`import taskloom` stay cheap.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["default_store_url", "main"]


def default_store_url() -> str:
    """The CLI's embedded store: `$TASKLOOM_HOME/taskloom.db`, by default
    under `~/.local/share/taskloom/`."""
    home = os.environ.get("TASKLOOM_HOME") or str(Path.home() / ".local" / "share" / "taskloom")
    return f"sqlite:///{Path(home) / 'taskloom.db'}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="taskloom", description="A runtime for tool-using LLM agents."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="an offline, scripted tour of a run (no API key needed)")
    demo.add_argument("--fast", action="store_true", help="no pauses (for tests and CI)")

    run = sub.add_parser("run", help="run a prompt against a model and stream the answer")
    run.add_argument("prompt")
    run.add_argument("--model", required=True, help="PROVIDER:MODEL, e.g. openai:gpt-4.1-mini")
    run.add_argument(
        "--tool", action="append", default=[], help="a tool as module:attribute (repeatable)"
    )
    run.add_argument("--system", default=None, help="instructions (system prompt)")
    run.add_argument("--base-url", default=None, help="the server's base URL")
    run.add_argument("--store", default=None, help="store URL (default: the embedded SQLite store)")
    run.add_argument("--max-rounds", type=int, default=20)

    sessions = sub.add_parser("sessions", help="list and show stored sessions")
    ssub = sessions.add_subparsers(dest="action", required=True)
    ls = ssub.add_parser("list", help="the newest sessions")
    ls.add_argument("--limit", type=int, default=20)
    ls.add_argument("--store", default=None)
    show = ssub.add_parser("show", help="a session's transcript")
    show.add_argument("session_id")
    show.add_argument("--tree", action="store_true", help="draw the delegation tree")
    show.add_argument("--store", default=None)

    approve = sub.add_parser("approve", help="approve (or --deny) a parked tool call")
    approve.add_argument("session_id")
    approve.add_argument("call_id")
    approve.add_argument("--deny", action="store_true")
    approve.add_argument("--note", default=None)
    approve.add_argument("--store", default=None)

    resume = sub.add_parser("resume", help="resume a session parked for approval")
    resume.add_argument("session_id")
    resume.add_argument("--model", default=None, help="PROVIDER:MODEL (default: the session's)")
    resume.add_argument("--tool", action="append", default=[])
    resume.add_argument("--store", default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `taskloom` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import run_demo

            return run_demo(fast=args.fast)
        if args.command == "run":
            from .run import run_prompt

            return run_prompt(args)
        from .sessions import dispatch

        return dispatch(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from ..errors import TaskloomError

        if isinstance(exc, TaskloomError):
            print(f"taskloom: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
