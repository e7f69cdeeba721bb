"""`MCPServer`: an MCP server's tools as a toolset, and the runtime's
registry of connections (`MCPConnections`)."""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import Mapping, Sequence
from typing import Literal, TypedDict, Unpack
from urllib.parse import urlsplit

from ..errors import ConfigurationError, UsageError
from ..runtime import Runtime
from ..tools import DEFAULT_MAX_OUTPUT_CHARS, Tool, ToolHost
from ._connection import Connection
from ._lifecycle import MCPLimits
from ._taskcalls import TaskCalls
from ._tool import Approval, MCPTool
from ._transport import HttpLaunch, Launch, StdioLaunch

DEFAULT_TIMEOUT = 60.0
"""Seconds one tool call may take by default (`timeout=None`: no limit)."""

DEFAULT_LIMITS = MCPLimits()
"""The waits on a server unless it is given `limits` of its own."""

DEFAULT_TASK_AFTER = 10.0
"""Seconds a call running as an MCP task is waited for before it turns into
background work (with `tasks="auto"`)."""

TaskMode = Literal["auto", "always", "never"]
"""How calls of a tool that a server can run as MCP tasks are made:

- `"auto"`: as a task; answered inline if it ends within `task_after`
  seconds, else it goes on in the background and its result arrives later;
- `"always"`: as a task that goes to the background at once;
- `"never"`: inline, the call waiting for the result (a task the server
  makes anyway is waited for within the call)."""


class _Options(TypedDict, total=False):
    """What `MCPServer.stdio` and `.http` pass on to `MCPServer` as given."""

    prefix: str | None
    approval: Approval
    timeout: float | None
    max_output_chars: int
    tasks: TaskMode | Mapping[str, TaskMode]
    task_after: float
    task_ttl: float | None
    limits: MCPLimits


class MCPServer:
    """The tools of a Model Context Protocol server, usable wherever tools are:
    `Agent(tools=[MCPServer.stdio("mcp-server-time"), my_tool])`.

    Build one with `MCPServer.stdio(...)` or `MCPServer.http(...)`. Each
    `Runtime` opens one connection per server on first use and closes it in
    `runtime.close()` (`bind_runtime`); the tools are listed again from the
    next round on when the server announces that its list changed.

    `name` names it in messages (default: the command or host), `prefix`
    namespaces its tools (`prefix="time"` offers `time_get_current_time`),
    `approval` says which calls park for a human decision (`Approval`),
    `timeout` bounds one call in seconds (cancelled on the server), and
    `max_output_chars` caps a result like any tool's.

    For tool calls run as MCP tasks: `tasks` is a `TaskMode` for all tools or
    a mapping from a tool's name on the server to one (default `"auto"`),
    `task_after` the seconds an `"auto"` call waits before it turns into
    background work, `task_ttl` the seconds the server is asked to keep a
    task. A background task is in the session's log, so the session's next
    run in any process polls it on after a crash (docs/concepts/mcp-tasks.md).
    `limits` bound the waits on the server (`MCPLimits`).
    """

    __slots__ = (
        "__weakref__",
        "_connections",
        "_launch",
        "_secrets",
        "approval",
        "limits",
        "max_output_chars",
        "name",
        "prefix",
        "task_after",
        "task_ttl",
        "tasks",
        "timeout",
    )

    def __init__(
        self,
        launch: Launch,
        *,
        name: str,
        prefix: str | None = None,
        approval: Approval = "destructive",
        timeout: float | None = DEFAULT_TIMEOUT,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        tasks: TaskMode | Mapping[str, TaskMode] = "auto",
        task_after: float = DEFAULT_TASK_AFTER,
        task_ttl: float | None = None,
        limits: MCPLimits = DEFAULT_LIMITS,
    ) -> None:
        modes = [tasks] if isinstance(tasks, str) else list(tasks.values())
        if any(mode not in ("auto", "always", "never") for mode in modes):
            raise ConfigurationError(
                f"MCP server {name!r}: tasks={tasks!r}; use 'auto', 'always', 'never' "
                "or a mapping from tool name to one of them"
            )
        if task_after < 0:
            raise ConfigurationError(f"MCP server {name!r}: task_after must not be negative")
        if task_ttl is not None and task_ttl <= 0:
            raise ConfigurationError(f"MCP server {name!r}: task_ttl must be positive")
        if approval not in ("destructive", "always", "never") and not callable(approval):
            raise ConfigurationError(
                f"MCP server {name!r}: approval={approval!r}; use 'destructive', 'always', "
                "'never' or a predicate on (tool name, arguments)"
            )
        if timeout is not None and timeout <= 0:
            raise ConfigurationError(f"MCP server {name!r}: timeout must be positive")
        self._launch = launch
        self._secrets = launch.secrets()
        self.name = name
        self.prefix = prefix or None
        self.approval = approval
        self.timeout = timeout
        self.max_output_chars = max_output_chars
        self.tasks = tasks if isinstance(tasks, str) else dict(tasks)
        self.task_after = task_after
        self.task_ttl = task_ttl
        self.limits = limits
        self._connections: MCPConnections | None = None

    @property
    def secrets(self) -> tuple[str, ...]:
        """The credentials this server is sent (headers, the URL's, credential-named
        environment variables): redacted from all its tools and tasks log."""
        return self._secrets

    @property
    def key(self) -> str:
        """Who this server is across processes (its name and its command or
        URL, no credentials): a task is polled again only on the same key."""
        return f"{self.name}|{self._launch.describe()}"

    def task_mode(self, tool: str) -> TaskMode:
        """How calls of `tool` (its name on the server) use tasks."""
        if isinstance(self.tasks, str):
            return self.tasks  # type: ignore[return-value]
        return self.tasks.get(tool, "auto")

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        name: str | None = None,
        **options: Unpack[_Options],
    ) -> MCPServer:
        """A server taskloom runs as `command args` and speaks to over stdio.

        It gets the SDK's safe default environment plus `env`. A keeper process
        ends it and all it started when the runtime closes, when it exits, and
        when this process dies, even by `SIGKILL` (on Linux; elsewhere only its
        process group). One that exits mid-call is started again by the next call.
        """
        if isinstance(args, str):
            raise ConfigurationError(f"MCPServer.stdio({command!r}): args is a list of strings")
        launch = StdioLaunch(
            command,
            tuple(args),
            tuple(sorted((env or {}).items())),
            os.fspath(cwd) if cwd is not None else None,
        )
        return cls(launch, name=name or _command_name(command, tuple(args)), **options)

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        **options: Unpack[_Options],
    ) -> MCPServer:
        """A server at `url` (streamable HTTP). `headers` go with every
        request, never logged, shown or stored, nor are the URL's credentials;
        an echo of them is stored `[redacted]`."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(f"MCPServer.http: {url!r} is not an http(s) URL")
        launch = HttpLaunch(url, tuple(sorted((headers or {}).items())))
        return cls(launch, name=name or parts.hostname, **options)

    def __repr__(self) -> str:
        kind = "stdio" if isinstance(self._launch, StdioLaunch) else "http"
        return f"MCPServer.{kind}({self._launch.describe()!r}, name={self.name!r})"

    def bind_runtime(self, runtime: Runtime) -> MCPServer:
        """This server as `runtime` offers it: listed and called through the
        runtime's connection (see `taskloom.runtime.BindsRuntime`)."""
        bound = copy.copy(self)
        bound._connections = MCPConnections.of(runtime)
        return bound

    async def current_tools(self, host: ToolHost) -> Sequence[Tool]:
        """The server's tools as of now (the `Toolset` protocol), on the runtime
        it is bound to (`UsageError` without one); `ConfigurationError` when
        the server does not start or its tools cannot be used."""
        if self._connections is None:
            raise UsageError(
                f"MCP server {self.name!r} lists its tools through a runtime that binds it"
            )
        return await self._connections.tools_for(self)


def _command_name(command: str, args: tuple[str, ...]) -> str:
    if "-m" in args[:-1]:
        return args[args.index("-m") + 1]
    return os.path.splitext(os.path.basename(command))[0] or command


class MCPConnections:
    """A runtime's MCP connections (`MCPConnections.of(runtime)`): one per
    command or URL and limits, opened on first use, closed with the runtime."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._connections: dict[tuple[Launch, MCPLimits], Connection] = {}
        self._tools: dict[MCPServer, tuple[object, tuple[Tool, ...]]] = {}

    @classmethod
    def of(cls, runtime: Runtime) -> MCPConnections:
        """The registry of `runtime`."""
        return runtime.service(cls, cls)

    def connection(self, server: MCPServer) -> Connection:
        """The connection `server`'s tools go through."""
        key = (server._launch, server.limits)
        found = self._connections.get(key)
        if found is None:
            found = self._connections[key] = Connection(server._launch, server.name, server.limits)
        return found

    async def tools_for(self, server: MCPServer) -> tuple[Tool, ...]:
        """`server`'s tools as taskloom tools: the same tuple while its list is unchanged."""
        connection = self.connection(server)
        listing = await connection.listing()
        calls = TaskCalls.of(self._runtime)
        calls.know(server)
        cached = self._tools.get(server)
        if cached is not None and cached[0] is listing:
            return cached[1]
        tools = tuple(MCPTool(server, remote, connection, calls) for remote in listing)
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
