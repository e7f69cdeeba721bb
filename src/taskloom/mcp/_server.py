"""`MCPServer`: an MCP server's tools as a toolset, and the runtime's
registry of connections (`MCPConnections`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigurationError
from ..runtime import Runtime
from ..tools import DEFAULT_MAX_OUTPUT_CHARS, Tool, ToolHost
from ._connection import Connection
from ._tool import Approval, MCPTool
from ._transport import HttpLaunch, Launch, StdioLaunch

__all__ = ["MCPConnections", "MCPServer"]

DEFAULT_TIMEOUT = 60.0
"""Seconds one tool call may take by default (`timeout=None`: no limit)."""


class MCPServer:
    """The tools of a Model Context Protocol server, usable wherever tools are:
    `Agent(tools=[MCPServer.stdio("mcp-server-time"), my_tool])`.

    Build one with `MCPServer.stdio(...)` (a command taskloom starts) or
    `MCPServer.http(...)` (a streamable HTTP endpoint). It holds no
    connection itself: each `Runtime` opens one connection per server on
    first use, shares it among its sessions, and closes it in
    `runtime.close()`. The tools are listed once; when the server announces
    that its list changed, the new list is offered from the next round on.

    `name` names it in messages (default: the command or host), `prefix`
    namespaces its tools (`prefix="time"` offers `time_get_current_time`),
    `approval` says which calls park for a human decision (see
    `taskloom.mcp.Approval`; default `"destructive"`), `timeout` bounds one
    call in seconds (the call is cancelled on the server), and
    `max_output_chars` caps a result like any tool's.
    """

    __slots__ = ("_launch", "approval", "max_output_chars", "name", "prefix", "timeout")

    def __init__(
        self,
        launch: Launch,
        *,
        name: str,
        prefix: str | None = None,
        approval: Approval = "destructive",
        timeout: float | None = DEFAULT_TIMEOUT,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> None:
        if approval not in ("destructive", "always", "never") and not callable(approval):
            raise ConfigurationError(
                f"MCP server {name!r}: approval={approval!r}; use 'destructive', 'always', "
                "'never' or a predicate on (tool name, arguments)"
            )
        if timeout is not None and timeout <= 0:
            raise ConfigurationError(f"MCP server {name!r}: timeout must be positive")
        self._launch = launch
        self.name = name
        self.prefix = prefix or None
        self.approval = approval
        self.timeout = timeout
        self.max_output_chars = max_output_chars

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        name: str | None = None,
        prefix: str | None = None,
        approval: Approval = "destructive",
        timeout: float | None = DEFAULT_TIMEOUT,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> MCPServer:
        """A server taskloom runs as `command args` and speaks to over stdio.

        The process gets the SDK's safe default environment (`PATH`, `HOME`,
        `USER`, ...) plus `env`, never the host's whole environment: API
        keys stay out of it unless passed. It runs under a keeper process
        (see `taskloom.background._keeper`) that ends it and everything it
        started — also what left its process group or session — when the
        runtime closes, when the server exits (what it left running), and
        when this process dies, even by `SIGKILL`. That takes Linux (a
        subreaper and `/proc`); elsewhere the server's process group is
        ended and what left it survives. One that exits mid-call is started
        again by the next call.
        """
        if isinstance(args, str):
            raise ConfigurationError(f"MCPServer.stdio({command!r}): args is a list of strings")
        launch = StdioLaunch(
            command,
            tuple(args),
            tuple(sorted((env or {}).items())),
            os.fspath(cwd) if cwd is not None else None,
        )
        return cls(
            launch,
            name=name or _command_name(command, tuple(args)),
            prefix=prefix,
            approval=approval,
            timeout=timeout,
            max_output_chars=max_output_chars,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        prefix: str | None = None,
        approval: Approval = "destructive",
        timeout: float | None = DEFAULT_TIMEOUT,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> MCPServer:
        """A server at `url` (streamable HTTP). `headers` go with every
        request; they are never logged, shown, or stored in a session."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(f"MCPServer.http: {url!r} is not an http(s) URL")
        launch = HttpLaunch(url, tuple(sorted((headers or {}).items())))
        return cls(
            launch,
            name=name or parts.hostname,
            prefix=prefix,
            approval=approval,
            timeout=timeout,
            max_output_chars=max_output_chars,
        )

    def __repr__(self) -> str:
        kind = "stdio" if isinstance(self._launch, StdioLaunch) else "http"
        return f"MCPServer.{kind}({self._launch.describe()!r}, name={self.name!r})"

    async def current_tools(self, host: ToolHost) -> Sequence[Tool]:
        """The server's tools as of now (the `Toolset` protocol): listed on
        first use, then answered from the runtime's cache until the server
        says its list changed. Raises `ConfigurationError` when the server
        does not start or its tools cannot be used."""
        return await MCPConnections.of(host).tools_for(self)


def _command_name(command: str, args: tuple[str, ...]) -> str:
    if "-m" in args[:-1]:
        return args[args.index("-m") + 1]
    return os.path.splitext(os.path.basename(command))[0] or command


class MCPConnections:
    """A runtime's MCP connections: one per server (servers with the same
    command or URL share one), opened on first use, closed with the runtime
    (`MCPConnections.of(runtime)`)."""

    def __init__(self, runtime: Any) -> None:
        self._connections: dict[Launch, Connection] = {}
        self._tools: dict[MCPServer, tuple[object, tuple[Tool, ...]]] = {}

    @classmethod
    def of(cls, host: ToolHost) -> MCPConnections:
        """The registry of the runtime `host` (a `taskloom.Runtime`)."""
        if not isinstance(host, Runtime):
            raise TypeError(f"MCP servers need a taskloom Runtime, not {type(host).__name__}")
        return host.service(cls, cls)

    def connection(self, server: MCPServer) -> Connection:
        """The connection `server`'s tools go through."""
        found = self._connections.get(server._launch)
        if found is None:
            found = self._connections[server._launch] = Connection(server._launch, server.name)
        return found

    async def tools_for(self, server: MCPServer) -> tuple[Tool, ...]:
        """`server`'s tools as taskloom tools: the same tuple while its list is unchanged."""
        listing = await self.connection(server).listing()
        cached = self._tools.get(server)
        if cached is not None and cached[0] is listing:
            return cached[1]
        tools = tuple(MCPTool(server, remote) for remote in listing)
        names = [t.name for t in tools]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigurationError(f"MCP server {server.name!r} lists tools twice: {twice}")
        self._tools[server] = (listing, tools)
        return tools

    async def close(self) -> None:
        """Close every connection (servers stopped, processes gone)."""
        connections = list(self._connections.values())
        self._connections.clear()
        self._tools.clear()
        await asyncio.gather(*(c.close() for c in connections))
