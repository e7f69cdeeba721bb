"""`taskloom a2a serve module:agent [--http HOST:PORT]`: an agent as an A2A server.

Prints the URL once it accepts calls. Each A2A task is a session of a
runtime on `--store` (default: in memory; with a database, tasks outlive
the process). The bearer token is read from an environment variable, never
from the command line, where other users of the machine could see it.
"""

from __future__ import annotations

import argparse
import asyncio

from ..errors import ConfigurationError
from . import examples
from .failures import with_hint
from .mcp import _address, _load_agent, add_guard_options, guard_options

__all__ = ["TOKEN_VARIABLE", "add_a2a_commands", "run_a2a"]

TOKEN_VARIABLE = "TASKLOOM_A2A_TOKEN"
"""The default environment variable holding the bearer token clients must send."""


def add_a2a_commands(a2a: argparse.ArgumentParser, parents: list[argparse.ArgumentParser]) -> None:
    """The `a2a` subcommands (the parser only: nothing heavy is imported here)."""
    sub = a2a.add_subparsers(dest="action", required=True)
    serve = sub.add_parser(
        "serve",
        help="serve an agent over A2A",
        description="Serve an agent over A2A.",
        epilog=examples(
            "taskloom a2a serve myagents:researcher",
            "taskloom a2a serve myagents:researcher --http 127.0.0.1:9000 --store sqlite:///a2a.db",
            "taskloom a2a serve myagents:researcher --http 0.0.0.0:8000 --token-env RESEARCH_TOKEN",
            then=f"The bearer token clients must send is read from ${TOKEN_VARIABLE} (or the\n"
            "variable --token-env names), never from the command line.\n",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=parents,
    )
    serve.add_argument("agent", metavar="MODULE:AGENT", help="an Agent, or a factory returning one")
    serve.add_argument(
        "--http",
        default="127.0.0.1:8000",
        metavar="HOST:PORT",
        help="listen at http://HOST:PORT/ (default 127.0.0.1:8000); port 0 picks one",
    )
    serve.add_argument("--store", default="memory://", help="store URL for the tasks' sessions")
    add_guard_options(serve, TOKEN_VARIABLE)


def run_a2a(args: argparse.Namespace) -> int:
    """Run an `a2a` subcommand; returns the exit code."""
    from ..a2a import serve_agent
    from ..runtime import Runtime

    host, port = _address(args.http)
    token = guard_options(args, host)
    agent = asyncio.run(_load_agent(args.agent, "a2a serve"))
    try:
        runtime = Runtime(store=args.store, agents=[agent])
    except ValueError as exc:
        raise with_hint(
            ConfigurationError(f"--store {args.store}: {exc}"),
            "--store takes memory://, sqlite:///path or postgresql://user@host/db",
        ) from exc

    def ready(url: str) -> None:
        guarded = "with a bearer token" if token else "without a token"
        print(f"taskloom: serving agent {agent.name!r} over A2A at {url} ({guarded})", flush=True)

    served = serve_agent(
        agent, runtime, host=host, port=port, token=token, max_body=args.max_body, on_ready=ready
    )
    asyncio.run(served)
    return 0
