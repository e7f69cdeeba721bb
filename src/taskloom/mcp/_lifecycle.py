"""One MCP server's life under a connection: its starts, restarts and close.

The SDK's `Client` lives in anyio task groups, entered and left by one task,
while a connection is opened by whichever run needs it and closed from
another: so each start has its own owner task that enters the `Client`,
hands it out and waits to leave. A stdio server that goes away is noticed at
once (a call in flight gets an error naming its stderr's tail) and started
again after a backoff, at most `MCPLimits.restarts` times a minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.client import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import __version__
from ..errors import ConfigurationError
from ..tools import ToolError
from ._tasks import TasksClient, related_task
from ._transport import Launch, StderrTail, kill_leftovers, watched

Asker = Callable[[str, dict[str, Any]], Awaitable[types.ElicitResult | types.ErrorData]]
"""Who answers what a server asks during task `task_id` (its `elicitation/create`
request as `{"method": ..., "params": ...}`)."""

logger = logging.getLogger("taskloom.mcp")


@dataclass(frozen=True, slots=True)
class MCPLimits:
    """How long taskloom waits on an MCP server, and how often it tries again
    (`MCPServer.stdio(..., limits=MCPLimits(startup=180))`).

    `startup`: seconds to start, answer the handshake and list the tools;
    `close`: seconds the runtime's close waits for it to stop (then what is
    left is killed); `restarts` per minute of a server that keeps going away,
    each after its `restart_backoff` pause; `poll_backoff`: the pauses between
    failing polls of a background task, which fails after `give_up_after`
    in a row. The last pause of a backoff repeats.
    """

    startup: float = 60.0
    close: float = 15.0
    restarts: int = 5
    restart_backoff: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
    poll_backoff: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
    give_up_after: int = 8

    def __post_init__(self) -> None:
        if not (self.startup > 0 and self.close > 0):
            raise ConfigurationError("MCPLimits: startup and close must be positive")
        if self.restarts < 1 or self.give_up_after < 1:
            raise ConfigurationError("MCPLimits: restarts and give_up_after must be at least 1")
        for name in ("restart_backoff", "poll_backoff"):
            # A tuple whatever was given: the limits are part of a connection's key.
            pauses = tuple(getattr(self, name))
            object.__setattr__(self, name, pauses)
            if not pauses or any(not pause >= 0 for pause in pauses):
                raise ConfigurationError(
                    f"MCPLimits: {name} must be one pause or more, none negative"
                )


@dataclass(eq=False)
class _Start:
    """One start of the server: its owner task, client, and what it learnt."""

    opening: asyncio.Future[Client]
    tail: StderrTail | None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    client: Client | None = None
    ended: bool = False
    garbage: str | None = None
    group: int | None = None
    task: asyncio.Task[None] | None = None
    aborted: str | None = None
    """Why the start was cancelled ("deadline", "closed"); "entered" once
    it can no longer be."""


class ServerLifecycle:
    """The starts of one server: `client()` gives the running one's client,
    starting it when none runs; `close()` stops it for good."""

    def __init__(self, launch: Launch, label: str, limits: MCPLimits) -> None:
        self.launch = launch
        self.label = label
        self.limits = limits
        self._current: _Start | None = None
        self._owners: dict[asyncio.Task[None], _Start] = {}
        self._exits: deque[float] = deque()
        self._in_a_row = 0
        self._starts = 0
        self._closed = False
        self._stale = True  # the tool list must be read again
        self._announced = asyncio.Condition()
        self.announcements = 0
        """How many times the server said its tool list changed."""
        self.asker: Asker | None = None
        """Who answers the server's questions during a task (None: refused)."""
        self._fetching: Counter[str] = Counter()  # tasks whose `tasks/result` is open, how often

    async def client(self) -> Client:
        """The connected client, starting the server if need be (`ToolError`
        when it went away too often to restart now)."""
        current = self._current
        if current is not None and current.client is not None and not current.ended:
            return current.client
        if current is None or current.ended:
            current = self._start()
        # Shielded: a caller cancelled while the server starts leaves the
        # start to finish for the next caller.
        return await asyncio.shield(current.opening)

    def _start(self) -> _Start:
        if self._closed:
            raise ToolError(f"MCP server {self.label!r}: its runtime was closed")
        delay = 0.0
        if self._starts:
            now = time.monotonic()
            while self._exits and self._exits[0] < now - 60:
                self._exits.popleft()
            if len(self._exits) >= self.limits.restarts:
                wait = 60 - (now - self._exits[0])
                raise ToolError(
                    f"MCP server {self.label!r} went away {len(self._exits)} times in the last "
                    f"minute; it is not restarted for another {wait:.0f}s"
                )
            backoff = self.limits.restart_backoff
            delay = backoff[min(self._in_a_row, len(backoff) - 1)]
        opening: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        # Whoever awaits it sees its failure; one left unawaited is not a warning.
        opening.add_done_callback(lambda done: done.cancelled() or done.exception())
        tail = StderrTail(self.label, self.launch.secrets()) if self.launch.is_process else None
        start = self._current = _Start(opening, tail)
        task = asyncio.get_running_loop().create_task(self._own(start, delay))
        start.task = task
        self._owners[task] = start

        def ended(_: object) -> None:
            del self._owners[task]
            self._settle(start)  # also for an owner cancelled before it ran

        task.add_done_callback(ended)
        return start

    async def _own(self, start: _Start, delay: float) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await self._enter(start, delay, stack)
                if client is None:
                    return  # closed while it was starting
                if start.tail is not None:
                    start.group = _process_group(start.tail)
                start.client = client
                self._starts += 1
                self._stale = True
                start.opening.set_result(client)
                await start.stop.wait()
        except Exception as exc:
            if not start.opening.done():
                start.opening.set_exception(await self._start_failed(start, exc))
            else:
                logger.debug("MCP server %r: closing it raised %r", self.label, exc)
        finally:
            self._settle(start)
            if start.tail is not None:
                # The keeper ends what the server left running; this is for
                # a server without one.
                killed = kill_leftovers(start.tail, start.group)
                if killed:
                    logger.info(
                        "MCP server %r: killed what it left running: %s", self.label, killed
                    )
                start.tail.close()

    def _settle(self, start: _Start) -> None:
        """The start is over: no client, and callers waiting for one are told."""
        start.ended = True
        start.client = None
        if not start.opening.done():
            start.opening.set_exception(
                ConfigurationError(f"MCP server {self.label!r}: closed while it was starting")
            )
        if start.tail is not None and start.task is not None and start.task.done():
            start.tail.close()

    async def _enter(
        self, start: _Start, delay: float, stack: contextlib.AsyncExitStack
    ) -> Client | None:
        """Start the server and enter its client on `stack`; None when closed
        meanwhile, `TimeoutError` past `limits.startup`."""
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None
        try:
            if delay:
                await asyncio.sleep(delay)
            timer = loop.call_later(self.limits.startup, self._abort, start, "deadline")
            if start.tail is not None:
                await start.tail.start()
            transport = watched(
                self.launch.transport(start.tail.writer if start.tail else None),
                lambda: self._went_away(start),
                lambda exc: self._garbage(start, exc),
            )
            client = Client(
                transport,
                cache=None,
                client_info=types.Implementation(name="taskloom", version=__version__),
                message_handler=self._on_message,
                elicitation_callback=self._on_elicit,
                extensions=[TasksClient()],
            )
            try:
                await stack.enter_async_context(client)
                # Since 2026-07-28 a server announces a changed tool list only on a
                # `subscriptions/listen` stream the client opened; earlier servers
                # send the notification unasked. Both reach `_on_message`.
                tools = client.server_capabilities.tools
                modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
                if modern and tools is not None and tools.list_changed:
                    await stack.enter_async_context(client.listen(tools_list_changed=True))
            finally:
                if start.tail is not None:
                    start.tail.spawned()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            # Ours alone (nobody else cancelled the task too): a deadline or a close.
            if start.aborted is None or task is None or task.uncancel() > 0:
                raise
            if start.aborted == "deadline":
                raise TimeoutError from None
            return None
        finally:
            start.aborted = start.aborted or "entered"
            if timer is not None:
                timer.cancel()
        return client

    def _abort(self, start: _Start, why: str) -> None:
        """Cancel a start that has not entered its client yet, once (a second
        cancel would break into the SDK's shielded stop and hang it)."""
        if start.aborted is None and start.task is not None:
            start.aborted = why
            start.task.cancel()

    async def _start_failed(self, start: _Start, exc: Exception) -> ConfigurationError:
        self._went_away(start)
        what = f"MCP server {self.label!r} ({self.launch.describe()})"
        if isinstance(exc, TimeoutError):
            cause = f"did not answer the MCP handshake within {self.limits.startup:g}s"
        elif isinstance(exc, FileNotFoundError | PermissionError):
            cause = f"could not be started: {exc}"
        elif not self.launch.is_process:
            cause = f"could not be reached: {error_cause(exc)}"
        elif isinstance(inner := _innermost(exc), MCPError) and inner.code == CONNECTION_CLOSED:
            cause = "exited before answering the MCP handshake"
        else:
            cause = f"failed the MCP handshake: {error_cause(exc)}"
        if start.garbage is not None:
            cause += f"; it wrote something that is not JSON-RPC: {start.garbage!r}"
        tail = await _tail(start)
        if tail:
            cause += f"\nits stderr ended with:\n{tail}"
        elif self.launch.is_process:
            cause += " (it wrote nothing to stderr)"
        return ConfigurationError(f"{what} {cause}")

    def _went_away(self, start: _Start) -> None:
        """The server's stream ended: expected when we closed it, else a crash."""
        if start.ended or start.stop.is_set():
            return
        start.ended = True
        self._exits.append(time.monotonic())
        self._in_a_row += 1
        start.stop.set()

    def _garbage(self, start: _Start, exc: Exception) -> None:
        if start.garbage is None:
            logger.warning(
                "MCP server %r wrote something that is not JSON-RPC: %s", self.label, exc
            )
        start.garbage = str(exc)[:300]

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._stale = True
            async with self._announced:
                self.announcements += 1
                self._announced.notify_all()

    async def _on_elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        # Only a task can wait for a person (its question is parked in the
        # session's log); a question during a plain call cannot, and is refused.
        task_id = related_task(context.meta)
        if task_id is None and len(self._fetching) == 1:
            # Sent on the stream of the one `tasks/result` open: that task's.
            [task_id] = self._fetching
        if task_id is None or self.asker is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message="taskloom asks a person only for calls that run as MCP tasks",
            )
        asked = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        asked.pop("_meta", None)
        return await self.asker(task_id, {"method": "elicitation/create", "params": asked})

    async def announced(self, after: int = 0) -> int:
        """Wait until the server said its tool list changed more than `after`
        times; how many times it has."""
        async with self._announced:
            await self._announced.wait_for(lambda: self.announcements > after)
            return self.announcements

    def modern(self) -> bool | None:
        """Whether the connection speaks 2026-07-28 (None: not connected)."""
        current = self._current
        if current is None or current.client is None:
            return None
        return current.client.protocol_version in MODERN_PROTOCOL_VERSIONS

    async def _gone(self, start: _Start) -> str:
        self._went_away(start)
        if not self.launch.is_process:
            return (
                f"MCP server {self.label!r} closed the connection mid-call; "
                "the next call connects again"
            )
        tail = await _tail(start)
        said = f": {tail}" if tail else " (it wrote nothing to stderr)"
        return f"MCP server {self.label!r} exited mid-call{said}; the next call restarts it"

    async def close(self) -> None:
        """Stop the server and wait until it is gone, `limits.close` seconds
        at most (then what is left is killed); always returns."""
        self._closed = True
        owners = dict(self._owners)
        current = self._current
        if current is not None:
            current.stop.set()
            self._abort(current, "closed")  # still starting: the SDK unwinds the spawn
        if not owners:
            return
        _, stuck = await asyncio.wait(owners, timeout=self.limits.close)
        if stuck:
            logger.warning(
                "MCP server %r did not stop within %gs; killing what is left of it",
                self.label,
                self.limits.close,
            )
            for task in stuck:
                task.cancel()
                tail = owners[task].tail
                # SIGTERM its process group: its keeper then kills all of it.
                group = _process_group(tail) if tail is not None else None
                if group is not None:
                    with contextlib.suppress(OSError):
                        os.killpg(group, signal.SIGTERM)


def _process_group(tail: StderrTail) -> int | None:
    """The process group of the server we started (its keeper's): our child,
    leading a session of its own, with its stderr on our pipe."""
    me = os.getpid()
    found = [p.pgrp for p in tail.holders() if p.ppid == me and p.pgrp == p.pid]
    return found[0] if len(found) == 1 else None


async def _tail(start: _Start) -> str:
    if start.tail is None:
        return ""
    await start.tail.settle()
    return start.tail.text()


def _innermost(exc: BaseException) -> BaseException:
    """`exc`, or the first error of its group (task groups wrap errors in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def error_cause(exc: BaseException) -> str:
    """The innermost useful message of `exc`."""
    exc = _innermost(exc)
    if isinstance(exc, MCPError):
        return f"{exc.message} (JSON-RPC error {exc.code})"
    text = first_line(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""
