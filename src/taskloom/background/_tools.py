"""The opt-in background command tools: run, status, wait, stop.

`background_run` starts a command and returns its id at once; its exit code
and capped output become a notice at a later round boundary, unless
`background_wait` hands them over early. Each tool set tracks the commands
it started here and their spill files, per session, so deleting a session
kills those commands and removes those files.
"""

from __future__ import annotations

import asyncio
import copy
import os
import re
import shlex
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from .._ids import uuid4_hex
from .._redact import credentials
from ..backends import BackgroundActivity, BackgroundNotice, NoticeStatus
from ..errors import BackgroundCapReached, CommandNotStarted, ConfigurationError
from ..tools import Tool, ToolContext, ToolEffect, ToolError, UnboundTool, tool
from ._process import CommandProcess, OutputCapture, format_seconds
from ._service import BackgroundHost, BackgroundService, WorkResult, redacted
from ._spills import SpillFiles

KIND = "shell"
"""The activity kind of every command these tools start."""

SAFE_ENV_NAMES = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TMPDIR",
    "TZ",
)
"""The host's variables every command gets, when the host has them (none
usually carries a secret)."""

_SPILL_NAME = re.compile(rf"{KIND}-[0-9a-f]{{12}}\.log")
"""What a spill file of these tools is called; no other file is ever removed."""

_BACKSTOP_MARGIN = 5.0
"""Seconds past its timeout and grace after which a command's keeper ends it
by itself: only for a host too busy or hung to do it."""

_POLL_SECONDS = 0.5
"""How often `background_wait` looks for notices written by other processes
(notices written in this process wake it at once)."""

_ENDED = {
    NoticeStatus.DONE: "finished",
    NoticeStatus.FAILED: "failed",
    NoticeStatus.TIMED_OUT: "timed out",
    NoticeStatus.STOPPED: "was stopped",
}


def background_tools(
    *,
    shell: bool = False,
    timeout: float = 600.0,
    max_output_chars: int = 16_384,
    spill_dir: str | os.PathLike[str] | None = None,
    max_running: int = 8,
    kill_grace: float = 2.0,
    env: Mapping[str, str] | None = None,
    inherit_env: bool = False,
    spill_retention: float | None = 86_400.0,
) -> list[Tool]:
    """The opt-in background command tools (`background_run`, `background_status`,
    `background_wait`, `background_stop`), sharing one configuration.

    `shell`: run commands with `/bin/sh -c` instead of splitting them with
    `shlex` and running the program directly; without, the model's string
    cannot use shell syntax, though it may still run `sh -c '...'`.
    `timeout`: seconds a command may run when the model gives none.

    Environment: only the host's variables named in `SAFE_ENV_NAMES`, then
    `env` on top, so the host's secrets are not there for the model to print;
    `inherit_env=True` gives the host's whole environment (then `env`).
    What a command prints of a credential-named variable of its environment
    (token, secret, password, key, auth, ... in the name) reaches results and
    notices as `[redacted]`.

    Every process a command starts ends with it (timeout, `background_stop`,
    session delete, runtime close, normal exit), also those that left its
    process group or session, and all are killed when the host dies, even by
    `SIGKILL`. That takes Linux (a subreaper and `/proc`); elsewhere only the
    command's process group is ended. A command that SIGKILLs its keeper
    orphans what it started. `kill_grace`: seconds between `SIGTERM` and
    `SIGKILL`.

    `max_output_chars`: how much output a result keeps, half head, half tail;
    longer output is written whole to a file (mode 0600) in `spill_dir`
    (default: a private temporary folder) that the result names. Spill files
    go when their session is deleted through a runtime of this process, or
    once older than `spill_retention` seconds (default one day; None keeps
    them), checked at most once a minute as commands start; only files named
    like spill files are removed. `max_running`: commands running at once in
    one session.
    """
    if timeout <= 0:
        raise ConfigurationError("background_tools: timeout must be positive")
    if max_output_chars < 0:
        raise ConfigurationError("background_tools: max_output_chars must not be negative")
    if max_running < 1:
        raise ConfigurationError("background_tools: max_running must be at least 1")
    if kill_grace < 0:
        raise ConfigurationError("background_tools: kill_grace must not be negative")
    if spill_retention is not None and spill_retention <= 0:
        raise ConfigurationError("background_tools: spill_retention must be positive (or None)")
    for name, value in (env or {}).items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise ConfigurationError(f"background_tools: env cannot hold the variable {name!r}")
    return _Commands(
        shell=shell,
        timeout=timeout,
        max_output_chars=max_output_chars,
        spill_dir=Path(spill_dir) if spill_dir is not None else None,
        max_running=max_running,
        kill_grace=kill_grace,
        env=dict(env or {}),
        inherit_env=inherit_env,
        spill_retention=spill_retention,
    ).tools()


@dataclass(eq=False, kw_only=True)
class _Commands:
    """What one tool set shares: its configuration and the commands it runs here."""

    shell: bool
    timeout: float
    max_output_chars: int
    spill_dir: Path | None
    max_running: int
    kill_grace: float
    env: dict[str, str]
    inherit_env: bool
    spill_retention: float | None

    def __post_init__(self) -> None:
        self.head_chars = self.max_output_chars // 2
        self.tail_chars = self.max_output_chars - self.head_chars
        self._spills = SpillFiles(self.spill_dir, self.spill_retention, _SPILL_NAME)
        # What a command may print of its credential-named variables is
        # redacted from its results and notices (as of when the set is made).
        self.secrets = credentials(env=self.environment())
        # Per runtime (its background service), per session: ids of the
        # commands running in this process. Weak: a tool set outlives runtimes.
        self._running: weakref.WeakKeyDictionary[BackgroundService, dict[str, set[str]]] = (
            weakref.WeakKeyDictionary()
        )

    def environment(self) -> dict[str, str]:
        """The environment a command starts with (read from the host's at each start)."""
        if self.inherit_env:
            env = dict(os.environ)
        else:
            env = {name: os.environ[name] for name in SAFE_ENV_NAMES if name in os.environ}
            env.setdefault("PATH", os.defpath)
        env.update(self.env)
        return env

    def argv(self, command: str) -> list[str]:
        """How `command` is executed; raises `ToolError` for one that cannot be."""
        if not command.strip():
            raise ToolError("the command is empty")
        if self.shell:
            return ["/bin/sh", "-c", command]
        try:
            return shlex.split(command)
        except ValueError as exc:
            raise ToolError(f"cannot split the command into words: {exc}") from None

    def tools(self) -> list[Tool]:
        """The four tools, each bound by the runtime offering it."""
        if self.shell:
            how = (
                "The command is run by /bin/sh -c, so pipes, redirections, `&&` and variables work."
            )
        else:
            how = (
                "The command is split into words like a shell would (quotes respected)"
                " and the program is run directly, without a shell: pipes, redirections,"
                " `&&` and variables are not available."
            )
        run = tool(
            effect=ToolEffect.EXTERNAL,
            description=(
                "Start a command in the background and return its id at once. "
                f"{how} When it ends, its exit code and output (long output cut in the"
                " middle) arrive as a background notice in a later turn. Use"
                " background_wait to wait for it, background_status to check on it and"
                " background_stop to stop it. It is killed if still running after"
                f" `timeout` seconds (default {self.timeout:g})."
            ),
        )(_OnRuntime.background_run)
        templates = [
            copy.copy(t)
            for t in (
                run,
                _OnRuntime.background_status,
                _OnRuntime.background_wait,
                _OnRuntime.background_stop,
            )
        ]
        for template in templates:
            template.secrets = self.secrets
        return [UnboundTool(template, partial(_OnRuntime, self)) for template in templates]

    async def start(
        self,
        service: BackgroundService,
        ctx: ToolContext,
        command: str,
        cwd: str | None,
        timeout: float,
    ) -> str:
        """Start `command` in the background of the calling tool's session; its activity id."""
        argv = self.argv(command)
        self._watch_deletes(service)
        self._spills.sweep()
        session_id = ctx.session_id
        activity_id = f"{KIND}-{uuid4_hex()[:12]}"

        spawned = asyncio.Event()

        async def work() -> WorkResult:
            try:
                output = OutputCapture(
                    self.head_chars,
                    self.tail_chars,
                    lambda: self._spills.path(service, session_id, activity_id),
                )
                try:
                    process = await CommandProcess.start(
                        command,
                        argv,
                        output=output,
                        cwd=cwd,
                        env=self.environment(),
                        grace=self.kill_grace,
                        backstop=timeout + self.kill_grace + _BACKSTOP_MARGIN,
                    )
                except CommandNotStarted as exc:
                    return NoticeStatus.FAILED, f"`{command}` could not start: {exc}"
                finally:
                    spawned.set()
                async with process:
                    try:
                        result = await process.wait(timeout)
                    except asyncio.CancelledError:
                        # The service cancels this task to stop the command (stop,
                        # session delete, runtime close). A stopped result, not the
                        # cancellation, lets the notice carry what it printed.
                        result = await process.stop()
                        if (task := asyncio.current_task()) is not None:
                            task.uncancel()
                return redacted((result.status, result.render()), self.secrets)
            finally:
                self._untrack(service, session_id, activity_id)

        # Tracked before the start: the delete hook must see every command
        # whose task exists.
        self._running[service].setdefault(session_id, set()).add(activity_id)
        try:
            await service.start(
                ctx,
                KIND,
                command,
                work,
                kind_cap=self.max_running,
                activity_id=activity_id,
                metadata={"cwd": cwd, "timeout": timeout},
            )
        except BaseException:
            self._untrack(service, session_id, activity_id)
            raise
        # Answer only once the process exists (or failed to start). A task
        # cancelled before its first step never runs its work at all — no
        # process, but no notice either — so a stop right after this call
        # must find the work already running.
        task = service.task_for(session_id, activity_id)
        if task is not None and not spawned.is_set():
            began = asyncio.get_running_loop().create_task(spawned.wait())
            try:
                await asyncio.wait({began, task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                began.cancel()
            if not spawned.is_set():
                self._untrack(service, session_id, activity_id)
        return activity_id

    def owns(self, service: BackgroundService, session_id: str, activity_id: str) -> bool:
        """Whether this tool set runs that command in this process."""
        return activity_id in self._running.get(service, {}).get(session_id, ())

    def _untrack(self, service: BackgroundService, session_id: str, activity_id: str) -> None:
        ids = self._running.get(service, {}).get(session_id)
        if ids is not None:
            ids.discard(activity_id)
            if not ids:
                del self._running[service][session_id]

    def _watch_deletes(self, service: BackgroundService) -> None:
        if service in self._running:
            return
        self._running[service] = {}

        async def end_session_commands(session_id: str) -> None:
            # Stopping cancels each command's work, which kills its process
            # tree and finishes it; the delete then clears those notices.
            for activity_id in list(self._running.get(service, {}).get(session_id, ())):
                await service.stop(session_id, activity_id)
            # After the stops: a stopped command's file is complete only once
            # its stop returned. A refused delete does not bring the files
            # back; the notices naming them keep the head and tail.
            self._spills.remove_session(service, session_id)

        service.listeners.on_delete(end_session_commands)


def _verb(notice: BackgroundNotice) -> str:
    return _ENDED.get(notice.status, f"ended ({notice.status})")


def _unknown(activity_id: str) -> str:
    return (
        f"{activity_id}: no running or unreported background work has this id"
        " (finished work is listed only until its result has been shown)"
    )


class _OnRuntime:
    """One tool set's commands on one runtime, through its background service.

    The methods taking `self` positional-only are the tools' functions (`@tool`
    leaves `self` out of the schema; binding fills it). `background_run`'s
    description depends on the tool set, so `_Commands.tools` decorates it.
    """

    def __init__(self, commands: _Commands, runtime: BackgroundHost) -> None:
        self.commands = commands
        self.runtime = runtime
        self.service = runtime.background

    async def background_run(
        self,
        /,
        command: str,
        ctx: ToolContext,
        cwd: str | None = None,
        timeout: float | None = None,
    ) -> str:
        """Start a command in the background.

        Args:
            command: The command line to run.
            cwd: The working directory (default: the host's).
            timeout: Seconds after which the command is killed.
        """
        commands = self.commands
        limit = commands.timeout if timeout is None else timeout
        if limit <= 0:
            raise ToolError("timeout must be a positive number of seconds")
        try:
            activity_id = await commands.start(self.service, ctx, command, cwd, limit)
        except BackgroundCapReached:
            raise ToolError(
                f"at most {commands.max_running} background commands may run at once in this"
                " session; wait for one to finish or stop one first"
            ) from None
        return (
            f"started {activity_id}: `{command}` (killed if still running after"
            f" {format_seconds(limit)}). Its exit code and output arrive as a background"
            " notice when it ends."
        )

    @tool(effect=ToolEffect.READ_ONLY)
    async def background_status(self, /, ctx: ToolContext, id: str | None = None) -> str:
        """Show which background work of this session is running or has finished, with elapsed time.

        Finished work is listed until its result has been shown to you.

        Args:
            id: One id to look up; omit it to list all.
        """
        running, finished = await self._snapshot(ctx.session_id)
        now = time.time()
        lines: list[str] = []
        for activity in running.values():
            if (id is None or activity.id == id) and activity.id not in finished:
                kind = "" if activity.kind == KIND else f" ({activity.kind})"
                lines.append(
                    f"{activity.id}{kind} running for {format_seconds(now - activity.started_at)}:"
                    f" {activity.description}"
                )
        for activity_id, notices in finished.items():
            if id is not None and activity_id != id:
                continue
            for notice in notices:
                first_line = notice.text.split("\n", 1)[0]
                lines.append(
                    f"{activity_id} {_verb(notice)} {format_seconds(max(0.0, now - notice.created_at))}"
                    f" ago: {first_line}"
                )
        if lines:
            return "\n".join(lines)
        if id is not None:
            return _unknown(id)
        return "no background work is running or waiting to be reported in this session"

    @tool(effect=ToolEffect.READ_ONLY)
    async def background_wait(
        self, /, ids: list[str], ctx: ToolContext, timeout: float = 60
    ) -> str:
        """Wait until background work finishes and return its results (exit code, output).

        Returns when all of `ids` have finished, or after `timeout` seconds
        with the ones still running named. Results returned here are not
        delivered again as notices.

        Args:
            ids: Ids returned by background_run.
            timeout: The most seconds to wait.
        """
        wanted = list(dict.fromkeys(i.strip() for i in ids if i.strip()))
        if not wanted:
            raise ToolError("give at least one id to wait for")
        started = time.monotonic()
        running, finished, stopping = await self._wait_for(ctx, wanted, max(0.0, timeout))
        waited = format_seconds(time.monotonic() - started)
        notices = self.service.notices_for(ctx.run_id)
        now = time.time()
        parts: list[str] = []
        for activity_id in wanted:
            if activity_id in finished:
                for notice in finished[activity_id]:
                    parts.append(f"{activity_id} {_verb(notice)}: {notice.text}")
                    if notices is not None:
                        # Acked by the loop once this result is persisted.
                        notices.mark_seen(notice.id)
            elif activity_id in running:
                elapsed = format_seconds(now - running[activity_id].started_at)
                parts.append(
                    f"{activity_id} is still running ({elapsed} so far, waited {waited});"
                    " its result arrives as a notice when it ends"
                )
            else:
                parts.append(_unknown(activity_id))
        if stopping:
            parts.insert(0, "stopped waiting early: the run is stopping")
        return "\n\n".join(parts)

    @tool(effect=ToolEffect.EXTERNAL)
    async def background_stop(self, /, id: str, ctx: ToolContext) -> str:
        """Stop a command started with background_run, with everything it spawned.

        Its result, with the output so far, arrives as a notice saying it was stopped.

        Args:
            id: The id background_run returned.
        """
        service, session_id = self.service, ctx.session_id
        if self.commands.owns(service, session_id, id) and await service.stop(session_id, id):
            return f"stopped {id}; its notice with the output so far follows"
        running, finished = await self._snapshot(session_id)
        if id not in finished:
            activity = running.get(id)
            if activity is None:
                raise ToolError(_unknown(id))
            if activity.kind != KIND:
                raise ToolError(
                    f"{id} is {activity.kind} work, not a command: background_stop stops commands"
                )
            # Started by another tool set of this runtime, or in another process.
            if await service.stop(session_id, id):
                return f"stopped {id}; its notice with the output so far follows"
            running, finished = await self._snapshot(session_id)
            if id not in finished:
                raise ToolError(f"{id} runs in another process and cannot be stopped from here")
        ended = finished[id][-1].status
        return f"{id} has already ended ({ended}); its result is waiting to be shown"

    async def _snapshot(
        self, session_id: str
    ) -> tuple[dict[str, BackgroundActivity], dict[str, list[BackgroundNotice]]]:
        """The session's running activities and pending notices, by activity id."""
        service = self.service
        # Registry before inbox: `finish` pushes the notice before it removes the
        # registration, so work missing from both reads has really ended and
        # been reported (or never existed) — never finished in between unseen.
        running = {a.id: a for a in await service.registry.list(session_id)}
        finished: dict[str, list[BackgroundNotice]] = {}
        for notice in await service.inbox.pending(session_id):
            finished.setdefault(notice.activity_id, []).append(notice)
        return running, finished

    async def _wait_for(
        self, ctx: ToolContext, ids: list[str], timeout: float
    ) -> tuple[dict[str, BackgroundActivity], dict[str, list[BackgroundNotice]], bool]:
        """Poll until none of `ids` runs, `timeout` passed or the run stops: the
        last snapshot and whether the run's stop cut the wait short."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        wanted = set(ids)
        woken = asyncio.Event()
        unwatch = self.runtime.watch(ctx.session_id, woken.set)
        stopped = loop.create_task(ctx.stop.wait())
        try:
            while True:
                # Cleared before reading: a notice written during the reads
                # wakes the next wait instead of being missed.
                woken.clear()
                running, finished = await self._snapshot(ctx.session_id)
                running = {i: a for i, a in running.items() if i in wanted and i not in finished}
                finished = {i: n for i, n in finished.items() if i in wanted}
                remaining = deadline - loop.time()
                if not running or remaining <= 0 or ctx.stop.is_set:
                    return running, finished, bool(running) and ctx.stop.is_set
                wake = loop.create_task(woken.wait())
                try:
                    await asyncio.wait(
                        {wake, stopped},
                        timeout=min(_POLL_SECONDS, remaining),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    wake.cancel()
        finally:
            unwatch()
            stopped.cancel()
