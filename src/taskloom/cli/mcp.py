"""`taskloom mcp serve module:agent [--http HOST:PORT]`: an agent as an MCP server.

On stdio (the default) stdin and stdout carry the protocol, so nothing else
is printed there; with `--http` the server listens on streamable HTTP and
prints its URL once it accepts calls. Each call runs in a fresh session of
a runtime on `--store` (default: in memory). Over HTTP, the bearer token
clients must send is read from an environment variable (as `taskloom a2a
serve` does), and is required beyond loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import sys
from typing import TYPE_CHECKING

from .._serving import MAX_JSONRPC_BODY, require_token_beyond_loopback
from ..errors import ConfigurationError, UsageError
from . import examples
from .failures import with_hint
from .serve import add_max_body

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["TOKEN_VARIABLE", "add_guard_options", "add_mcp_commands", "guard_options", "run_mcp"]

TOKEN_VARIABLE = "TASKLOOM_MCP_TOKEN"
"""The default environment variable holding the bearer token MCP clients must send."""


def add_mcp_commands(mcp: argparse.ArgumentParser, parents: list[argparse.ArgumentParser]) -> None:
    """The `mcp` subcommands (the parser only: nothing heavy is imported here)."""
    sub = mcp.add_subparsers(dest="action", required=True)
    about = "serve an agent as an MCP server with one tool"
    serve = sub.add_parser(
        "serve",
        help=about,
        description=about[:1].upper() + about[1:] + ".",
        epilog=examples(
            "taskloom mcp serve myagents:researcher",
            "taskloom mcp serve myagents:make_researcher --http 127.0.0.1:8000",
            "taskloom mcp serve myagents:researcher --http 127.0.0.1:0 --store sqlite:///mcp.db",
            then="MODULE:AGENT is found like python -m finds a module (this folder included).\n",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=parents,
    )
    serve.add_argument("agent", metavar="MODULE:AGENT", help="an Agent, or a factory returning one")
    serve.add_argument(
        "--http",
        default=None,
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp (default: stdio); port 0 picks one",
    )
    serve.add_argument("--store", default="memory://", help="store URL for the calls' sessions")
    add_guard_options(serve, TOKEN_VARIABLE)


def add_guard_options(serve: argparse.ArgumentParser, variable: str) -> None:
    """`--token-env NAME` and `--max-body BYTES`, of the commands that serve
    an agent over HTTP (`mcp serve`, `a2a serve`)."""
    serve.add_argument(
        "--token-env",
        default=variable,
        metavar="NAME",
        help=f"environment variable with the bearer token clients must send (default "
        f"{variable}; unset: no token, and only a loopback address)",
    )
    add_max_body(serve, MAX_JSONRPC_BODY)


def guard_options(args: argparse.Namespace, host: str) -> str | None:
    """The bearer token of `add_guard_options`, read from its environment
    variable (never the command line, where other users of the machine
    could see it); refused without one beyond loopback."""
    token = os.environ.get(args.token_env) or None
    try:
        require_token_beyond_loopback(host, token)
    except ConfigurationError as exc:
        raise with_hint(
            exc, f"set {args.token_env} to a secret clients send as Authorization: Bearer"
        ) from None
    return token


def run_mcp(args: argparse.Namespace) -> int:
    """Run an `mcp` subcommand; returns the exit code."""
    from ..mcp import serve_agent
    from ..runtime import Runtime

    address = _address(args.http) if args.http else None
    token = guard_options(args, address[0]) if address else None
    agent = asyncio.run(_load_agent(args.agent))
    try:
        runtime = Runtime(store=args.store, agents=[agent])
    except ValueError as exc:
        raise with_hint(
            ConfigurationError(f"--store {args.store}: {exc}"),
            "--store takes memory://, sqlite:///path or postgresql://user@host/db",
        ) from exc

    def ready(where: str) -> None:
        # On stdio, stdout is the protocol's: say it on stderr.
        out = sys.stderr if address is None else sys.stdout
        print(f"taskloom: serving agent {agent.name!r} over MCP at {where}", file=out, flush=True)

    asyncio.run(
        serve_agent(
            agent, runtime, http=address, token=token, max_body=args.max_body, on_ready=ready
        )
    )
    return 0


async def _load_agent(ref: str, command: str = "mcp serve") -> Agent:
    from ..agent import Agent
    from .loading import load_object

    found = load_object(ref, command, "module:agent")
    if not isinstance(found, Agent) and callable(found):
        try:
            found = found()
            if inspect.isawaitable(found):
                found = await found
        except Exception as exc:
            raise with_hint(
                ConfigurationError(f"{command} {ref}: the factory failed: {exc!r}"),
                "fix the factory (--debug shows where it failed)",
            ) from exc
        except SystemExit as exc:
            raise with_hint(
                ConfigurationError(f"{command} {ref}: the factory called exit({exc.code!r})"),
                "the factory must return a taskloom.Agent, not exit",
            ) from exc
    if not isinstance(found, Agent):
        raise with_hint(
            ConfigurationError(f"{command} {ref} is a {type(found).__name__}, not an Agent"),
            "point it at a taskloom.Agent, or a function that takes no arguments and returns one",
        )
    return found


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise with_hint(
            UsageError(f"--http takes HOST:PORT, got {text!r}"),
            "for example --http 127.0.0.1:8000 (port 0 picks a free one)",
        )
    return host, int(port)
