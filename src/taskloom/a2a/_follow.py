"""Remote A2A tasks followed in the background of a parent's session.

A background call is followed work (`taskloom.background.Follows`, mode
`remote`): a child session of the parent whose log keeps the remote task's
id (and context id) as soon as the remote server gives it, under whose lease
one process follows it, ended by one notice and one terminal entry. At the
first round boundary of every run of the parent whose tools include the
background `RemoteAgent` (same name, same URL), each such child nobody
follows is followed again from its task id (`ResumesWork`), at once when its
follower died on this machine. This module keeps only what is A2A's.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._redact import redact
from ..backends import NoticeStatus, SessionMeta
from ..background import Detached, FollowJob, Follows, RunStart, WorkResult
from ..delegation import cap_answer, kept_answer, read_on
from ..entries import Entry, MessageEntry, SubagentResult
from ..messages import Message
from ..tools import ToolOutput
from ._exchange import cancel_task
from ._remote import RemoteAgent, Unreachable
from ._watch import Outcome, Watch

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ..tools import ToolContext

__all__ = ["KIND", "MODE", "keep_whole", "resume_following", "start_following"]

MODE = "remote"
"""The `mode` of a remote task's child session (its metadata and its link)."""

KIND = "remote_agent"
"""The activity kind of a remote task followed in the background."""


async def start_following(
    remote: RemoteAgent, runtime: Runtime, ctx: ToolContext, task: str, task_id: str
) -> ToolOutput:
    """Hand `task` to the remote agent in the background of the caller's
    session on `runtime` (or answer the question of `task_id`); a receipt at once."""
    follows = _follows(remote, runtime)
    child_id = await follows.begin(
        ctx,
        _RemoteFollow(remote, time.time(), task, task_id),
        mode=MODE,
        kind=KIND,
        name=remote.name,
        task=task,
        metadata={"url": remote.public_url},
    )
    receipt = {
        "id": child_id,
        "name": remote.name,
        "status": "started",
        "note": "The remote agent works in the background; its answer arrives as a"
        " notice at a later round.",
    }
    return ToolOutput(json.dumps(receipt))


async def resume_following(remote: RemoteAgent, runtime: Runtime, start: RunStart) -> None:
    """Follow again, under the run of `start`, the session's remote tasks of
    this agent that have no result yet and that no live process follows."""
    await _follows(remote, runtime).resume(start, MODE, _maker(remote), kind=KIND)


async def keep_whole(
    remote: RemoteAgent, runtime: Runtime, ctx: ToolContext, task: str, outcome: Outcome
) -> Outcome:
    """`outcome` of an inline call as the parent's model is told it: an answer
    or question longer than the agent's `max_answer_chars` is cut, its whole
    text (credentials redacted) kept first in a new, ended child session of
    the caller's (mode `remote`, as a background call's), where
    `read_agent(agent=..., offset=...)` reads on, as the cut says."""
    text = redact(outcome.text, remote.secrets)
    if outcome.kind not in ("answer", "question") or len(text) <= remote.max_answer_chars:
        return outcome
    store, child_id, now = runtime.store, uuid.uuid4().hex, time.time()
    meta = {
        "name": remote.name,
        "role": MODE,
        "mode": MODE,
        "task": " ".join(task.split())[:500],
        "parent_call_id": ctx.call_id,
        "started_at": now,
        "url": remote.public_url,
    }
    await store.create(SessionMeta(child_id, remote.name, ctx.session_id, now, meta))
    await store.append(child_id, Entry.of(MessageEntry(Message.assistant(text))))
    cut = _cut(text, remote.max_answer_chars, child_id)
    await store.append(child_id, Entry.of(SubagentResult("done", cut)))
    return outcome._replace(text=cut)


def _cut(text: str, limit: int, child_id: str) -> str:
    return cap_answer(text, limit, read_on(child_id, limit))


def _follows(remote: RemoteAgent, runtime: Runtime) -> Follows:
    follows = Follows.of(runtime)
    # Deleting a session cancels this agent's remote tasks in it.
    follows.register(MODE, f"{remote.name} {remote.public_url}", _maker(remote))
    return follows


def _maker(remote: RemoteAgent) -> Any:
    def make(meta: SessionMeta, record: Mapping[str, Any] | None) -> _RemoteFollow | None:
        # Children recorded before URLs were stored without credentials name the raw URL.
        url = meta.metadata.get("url")
        if meta.metadata.get("name") != remote.name or url not in (remote.public_url, remote.url):
            return None
        started_at = float(meta.metadata.get("started_at") or meta.created_at)
        return _RemoteFollow(remote, started_at)

    return make


class _RemoteFollow:
    """Follows one remote A2A task (`taskloom.background.Followed`)."""

    def __init__(
        self, remote: RemoteAgent, started_at: float, task: str = "", task_id: str = ""
    ) -> None:
        self.remote = remote
        self.started_at = started_at
        self.task = task
        self.task_id = task_id
        self.secrets = remote.secrets

    async def cancel(self, record: Mapping[str, Any]) -> None:
        """Cancel the remote task (best effort)."""
        if record.get("task_id"):
            try:
                async with self.remote.client() as client:
                    await cancel_task(client, str(record["task_id"]))
            except Unreachable:
                pass

    async def follow(self, job: FollowJob) -> WorkResult:
        """Hand the task over (or go on from its id), follow it to its end."""
        remote = self.remote
        watch = Watch(remote.name, job.runtime.background.emit, "", job.session_id, remote.secrets)
        try:
            outcome = await self._follow(job, watch)
        except asyncio.CancelledError:
            # Stopped: by the run that started it, a delete or the runtime's
            # close. The remote task was cancelled on the way out; what is
            # left is to say so, which needs this task un-cancelled.
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            outcome = Outcome(
                "stopped",
                "stopped before it finished; the remote task was cancelled",
                watch.task_id,
            )
        watch.finish(outcome)
        return await self._result(job, outcome)

    async def _follow(self, job: FollowJob, watch: Watch) -> Outcome:
        remote, record = self.remote, job.record
        left = self.started_at + remote.timeout - time.time()
        if record is not None and not record.get("task_id"):
            return Outcome(
                "failed",
                "the call was cut off before the remote agent gave its task an id;"
                " whether the task started there is unknown",
            )

        async def keep(task_id: str, context_id: str) -> None:
            await job.keep({"task_id": task_id, "context_id": context_id, "url": remote.public_url})

        try:
            async with remote.client(patient=record is not None) as client:
                if record is not None:
                    return await remote.exchange(client, watch, left, follow=str(record["task_id"]))
                return await remote.exchange(
                    client, watch, left, self.task, self.task_id, record=keep
                )
        except Unreachable as exc:
            return Outcome("failed", str(exc), watch.task_id)

    async def _result(self, job: FollowJob, outcome: Outcome) -> WorkResult:
        name, task_id, said = self.remote.name, outcome.task_id, outcome.text
        if outcome.kind in ("answer", "question"):
            said = await self._kept(job, redact(said, self.secrets))
        if outcome.kind == "answer":
            return NoticeStatus.DONE, f"remote agent {name!r} (task {task_id}) answered:\n{said}"
        if outcome.kind == "question":
            return NoticeStatus.DONE, (
                f"remote agent {name!r} asks for input (task_id {task_id}): {said}\n"
                f"To answer, call {name} again with task_id {json.dumps(task_id)}"
                " and your answer as task; the same task then goes on."
            )
        status = NoticeStatus.STOPPED if outcome.kind == "stopped" else NoticeStatus.FAILED
        return status, f"{self.remote.describe()}: {outcome.text}"

    async def _kept(self, job: FollowJob, text: str) -> str:
        """`text` as the notice tells it: cut at the agent's cap, the whole of
        it kept in the child's log first. Kept before the notice is
        delivered, so a parent told to read on finds it; a follower after a
        crash finds it kept and tells that one (the notice it may have
        delivered already cut that text). Raises `Detached` when the hold
        on the child was lost before it was kept: the follower that took
        the work over keeps it, then delivers the notice."""
        limit = self.remote.max_answer_chars
        if len(text) <= limit:
            return text
        kept = kept_answer(await job.runtime.store.load(job.child_id))
        if kept is None:
            await job.append(MessageEntry(Message.assistant(text)))
            if job.lease is None:
                raise Detached()
            kept = text
        return _cut(kept, limit, job.child_id)
