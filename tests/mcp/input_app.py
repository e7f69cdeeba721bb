"""The client side of the MCP input tests: an agent that calls `greet` on
the asking server (`asking_server.py`) as a task, and the `--app` factory
`taskloom answer` opens the test's store with.

    taskloom answer SESSION INPUT --app input_app:make_runtime --set name=Ada

`INPUT_STORE` names the store, `INPUT_SCHEMA` its PostgreSQL schema ("-": none).
"""

from __future__ import annotations

import os
from typing import Any

from taskloom import Agent, Runtime
from taskloom.backends import open_backend
from taskloom.mcp import MCPServer
from taskloom.models import FunctionModel, ModelRequest, reply

GREETING = "hello, "


def news(request: ModelRequest) -> str:
    """What reached the model since it last spoke."""
    tail: list[str] = []
    for message in reversed(request.messages):
        if message.role == "assistant":
            break
        tail.append(message.text)
    return "\n".join(reversed(tail))


def _assistant(request: ModelRequest) -> Any:
    if len(request.messages) == 1:
        return reply(tool_calls=[("greet", {})])
    if GREETING in news(request):
        return reply("Greeted.")
    return reply("Waiting for the greeting.")


def greeter(url: str, **options: Any) -> Agent:
    """The agent, with the asking server at `url` as its one MCP tool
    (`options` go to `MCPServer.http`)."""
    server = MCPServer.http(url, name="asking", tasks="always", approval="never", **options)
    return Agent("greeter", FunctionModel(_assistant), tools=[server])


def open_test_store(url: str, schema: str) -> Any:
    """The store of a `store_url` pair."""
    return open_backend(url, **({} if schema == "-" else {"schema": schema})).store


def make_runtime() -> Runtime:
    """The runtime `taskloom answer --app` uses: the test's store."""
    return Runtime(store=open_test_store(os.environ["INPUT_STORE"], os.environ["INPUT_SCHEMA"]))
