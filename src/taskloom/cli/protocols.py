"""`taskloom mcp serve` and `taskloom a2a serve module:agent [--http HOST:PORT]`:
an agent as an MCP or A2A server.

Each MCP call, or A2A task, runs in a session of a runtime on `--store`
(default: in memory; with a database, A2A tasks outlive the process). MCP
serves stdio by default: stdin and stdout carry the protocol, so nothing
else is printed there; over HTTP (`--http`, A2A's only transport) the
server prints its URL once it accepts calls. The bearer token clients must
send is read from an environment variable, never from the command line,
where other users of the machine could see it; it is required beyond
loopback.
"""

from __future__ import annotations

import asyncio
import os
import sys

from .._serving import require_token_beyond_loopback
from ..errors import ConfigurationError
from .common import ServeAgent, address, load_agent, store_runtime
from .failures import with_hint

__all__ = ["serve_agent"]


def serve_agent(args: ServeAgent) -> int:
    """Serve the agent until interrupted; returns the exit code."""
    if args.command == "mcp":
        from ..mcp import serve_agent as serve_mcp
    else:
        from ..a2a import serve_agent as serve_a2a
    # A2A serves HTTP only: its --http is never empty (its default, or what was given).
    http = address(str(args.http)) if args.http or args.command == "a2a" else None
    token = (os.environ.get(args.token_env) or None) if http else None
    if http is not None:
        try:
            require_token_beyond_loopback(http[0], token)
        except ConfigurationError as exc:
            raise with_hint(
                exc, f"set {args.token_env} to a secret clients send as Authorization: Bearer"
            ) from None
    agent = asyncio.run(load_agent(args.agent, f"{args.command} serve"))
    runtime = store_runtime(str(args.where.store), agents=[agent])
    protocol = args.command.upper()
    guarded = " (with a bearer token)" if token else " (without a token)"
    guarded = guarded if protocol == "A2A" else ""

    def ready(where: str) -> None:
        # On stdio, stdout is the protocol's: say it on stderr.
        out = sys.stderr if http is None else sys.stdout
        said = f"serving agent {agent.name!r} over {protocol} at {where}{guarded}"
        print(f"taskloom: {said}", file=out, flush=True)

    limit = args.max_body
    if args.command == "mcp":
        served = serve_mcp(agent, runtime, http=http, token=token, max_body=limit, on_ready=ready)
    else:
        assert http is not None
        host, port = http
        served = serve_a2a(
            agent, runtime, host=host, port=port, token=token, max_body=limit, on_ready=ready
        )
    asyncio.run(served)
    return 0
