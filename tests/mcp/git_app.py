"""A host app for the cross-process approval test: an agent that looks at a
git repository and resets its index with the real `mcp-server-git`.

    GIT_APP_DB=... GIT_APP_REPO=... python git_app.py park
        Runs a turn that calls `git_status` and the destructive `git_reset`,
        which parks it; prints `PARKED <session id>` and exits (the runtime
        closes, the server process with it).

`app()` is the factory `taskloom resume --app git_app:app` builds the same
agent from, in another process, to go on once the call is approved.
"""

from __future__ import annotations

import asyncio
import os
import sys

from taskloom import Agent, Runtime
from taskloom.mcp import MCPServer
from taskloom.models import ScriptedModel, reply

DB = os.environ.get("GIT_APP_DB", "")
REPO = os.environ.get("GIT_APP_REPO", "")


def agent(model: ScriptedModel) -> Agent:
    """The agent, with the git server's tools (`git_reset` is destructive)."""
    git = MCPServer.stdio(sys.executable, ["-m", "mcp_server_git", "--repository", REPO])
    return Agent("gitkeeper", model, tools=[git])


def app() -> Runtime:
    """The host's runtime: after the approval the model only has to say it is done."""
    return Runtime(f"sqlite:///{DB}", agents=[agent(ScriptedModel(["the index is clean again"]))])


async def park() -> None:
    calls = [
        ("git_status", {"repo_path": REPO}, "status-1"),
        ("git_reset", {"repo_path": REPO}, "reset-1"),
    ]
    async with Runtime(f"sqlite:///{DB}") as runtime:
        session = await runtime.create_session(agent(ScriptedModel([reply(tool_calls=calls)])))
        result = await session.run("clean the index")
        print(
            f"PARKED {session.id} {result.status.value} {[p.id for p in result.pending]}",
            flush=True,
        )


if __name__ == "__main__":
    if sys.argv[1:] == ["park"]:
        asyncio.run(park())
