"""Agents served over the Agent2Agent (A2A) protocol, and remote A2A agents as subagents.

    from taskloom.a2a import a2a_app
    app = a2a_app(agent, runtime, url="https://agents.example.com/", token=secret)

    researcher = RemoteAgent("researcher", "https://agents.example.com/", description="...")
    agent = Agent(tools=[researcher.tool(), my_tool])

`RemoteAgent` hands a task to an agent served over A2A, as a subagent, inline
or in the background (`background=True`: its answer arrives as a notice,
exactly once, also after a crash). `a2a_app` is an ASGI app to mount;
`serve_agent` (and `taskloom a2a serve module:factory`) runs one. Each A2A
task is a taskloom session. Built on the protocol's own SDK (the `a2a` extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._remote import RemoteAgent
    from ._serve import a2a_app, approves, serve_agent

__all__ = ["RemoteAgent", "a2a_app", "approves", "serve_agent"]

__getattr__ = lazy_exports(
    __name__,
    {
        "RemoteAgent": "._remote",
        "a2a_app": "._serve",
        "approves": "._serve",
        "serve_agent": "._serve",
    },
)
