"""One connection to an MCP server, owned by a runtime: its requests, each
bounded and every failure a `ToolError` for the model (its starts, restarts
and close are `ServerLifecycle`'s, see `_lifecycle`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import mcp_types as types
import pydantic
from mcp.client import Client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED

from .._run_controls import StopSignal
from ..errors import ConfigurationError
from ..tools import ToolError
from ._lifecycle import MCPLimits, ServerLifecycle, error_cause, first_line, logger
from ._tasks import (
    TaskState,
    fetch_result,
    get_task,
    task_capable,
)
from ._transport import Launch

_T = TypeVar("_T")

_LIST_PAGES = 100
"""Pages of a tools listing read at most (a paginator that never ends cannot hang)."""


class Connection(ServerLifecycle):
    """The runtime's connection to one server (`label` in messages, waits
    bounded by `limits`): `listing()` gives its tools, `call()` calls one."""

    def __init__(self, launch: Launch, label: str, limits: MCPLimits) -> None:
        super().__init__(launch, label, limits)
        self._listing: tuple[types.Tool, ...] | None = None
        self._listing_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"Connection({self.label!r}, {self.launch!r})"

    async def listing(self) -> tuple[types.Tool, ...]:
        """The server's tools, the same tuple until the list changes (a failed
        first listing is a `ConfigurationError`; a later one keeps the last)."""
        if self._listing is not None and not self._stale:
            return self._listing
        async with self._listing_lock:
            if self._listing is not None and not self._stale:
                return self._listing
            try:
                client = await self.client()
                # Cleared before asking: a change announced while the listing
                # is on its way is not lost.
                self._stale = False
                tools: list[types.Tool] = []
                cursor: str | None = None
                async with asyncio.timeout(self.limits.startup):
                    for _ in range(_LIST_PAGES):
                        page = await client.list_tools(cursor=cursor)
                        tools.extend(page.tools)
                        cursor = page.next_cursor
                        if cursor is None:
                            break
            except Exception as exc:
                self._stale = True
                if self._listing is None:
                    if isinstance(exc, ConfigurationError):
                        raise
                    raise ConfigurationError(
                        f"MCP server {self.label!r} did not list its tools: {error_cause(exc)}"
                    ) from exc
                logger.warning(
                    "MCP server %r: re-listing its tools failed (%s); keeping the last list",
                    self.label,
                    error_cause(exc),
                )
                return self._listing
            if tuple(tools) != self._listing:
                self._listing = tuple(tools)
            return self._listing

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float | None,
        progress: ProgressFnT | None,
        stop: StopSignal | None,
    ) -> types.CallToolResult:
        """Call tool `name`; every failure is a `ToolError` for the model. A
        stop of the run, a cancellation or the `timeout` cancels it on the server."""
        args = dict(arguments)

        def send(c: Client) -> Awaitable[types.CallToolResult]:
            return c.call_tool(name, args, progress_callback=progress)

        if stop is None:
            return await self.request(name, timeout, send)
        task = asyncio.current_task()
        assert task is not None
        stopping = False

        def cancel() -> None:
            nonlocal stopping
            stopping = True
            task.cancel()  # the SDK tells the server as the cancellation unwinds

        undo = stop.on_set(cancel)
        try:
            return await self.request(name, timeout, send)
        except asyncio.CancelledError:
            # Ours alone (no one else cancelled the task too): an answer for the model.
            if stopping and task.uncancel() == 0:
                raise ToolError(stopped(stop)) from None
            raise
        finally:
            undo()

    async def request(
        self, what: str, timeout: float | None, send: Callable[[Client], Awaitable[_T]]
    ) -> _T:
        """`send(client)`, bounded by `timeout`; every failure is a `ToolError`
        naming `what` (`TaskRefused` for a JSON-RPC error)."""
        try:
            client = await self.client()
        except ConfigurationError as exc:
            raise ToolError(f"{exc} (it was running before; the next call tries again)") from None
        start = self._current
        try:
            async with asyncio.timeout(timeout):
                answer = await send(client)
        except TimeoutError:
            note = ""
            if start is not None and start.garbage is not None:
                note = f"; it wrote something that is not JSON-RPC: {start.garbage!r}"
            raise ToolError(
                f"MCP server {self.label!r} did not answer {what!r} within {timeout:g}s; "
                f"the call was cancelled{note}"
            ) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED and start is not None:
                raise ToolError(await self._gone(start)) from None
            raise TaskRefused(
                f"MCP server {self.label!r} refused the call: {exc.message} "
                f"(JSON-RPC error {exc.code})",
                exc.code,
            ) from None
        except pydantic.ValidationError as exc:
            raise ToolError(
                f"MCP server {self.label!r} answered {what!r} with something that is not a "
                f"valid MCP result: {first_line(str(exc))}"
            ) from None
        except RuntimeError as exc:
            # The SDK checks structured content against the tool's outputSchema.
            raise ToolError(f"MCP server {self.label!r}: {exc}") from None
        self._in_a_row = 0
        return answer

    async def task_capable(self, tool: types.Tool) -> bool:
        """Whether the server runs calls of `tool` as tasks (False when it
        cannot be reached: the plain call then says what is wrong)."""
        try:
            client = await self.client()
        except (ConfigurationError, ToolError):
            return False
        return task_capable(client, tool)

    async def get_task(self, task_id: str, *, timeout: float | None) -> TaskState:
        """The task's state (its result once completed); failures as `request`'s."""
        return await self.request(
            f"task {task_id}", timeout, lambda c: get_task(c, task_id, timeout=timeout)
        )

    async def fetch_result(self, task_id: str) -> types.CallToolResult:
        """2025-11-25: wait on `tasks/result` for the task to end, letting the
        server send its questions meanwhile (to `asker`); failures as `request`'s."""
        self._fetching[task_id] += 1
        try:
            return await self.request(f"task {task_id}", None, lambda c: fetch_result(c, task_id))
        finally:
            self._fetching -= Counter({task_id: 1})  # drops the task once none is open


def stopped(stop: StopSignal) -> str:
    """What the model is told of a call a stop of its run cancelled."""
    return f"cancelled: the run was asked to stop{f' ({stop.reason})' if stop.reason else ''}"


class TaskRefused(ToolError):
    """The server answered a request with a JSON-RPC error (`code`)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
