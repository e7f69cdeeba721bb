"""Remote A2A tasks followed in the background of a parent's session.

A background call is followed work (`taskloom.background.Follows`, mode
`remote`): a child session of the parent whose log keeps the remote task's
id (and context id) as soon as it is known. At the first round boundary of
every run of the parent whose tools include the background `RemoteAgent`
(same name, same URL), each such child nobody follows is followed again
from its task id. This module keeps only what is A2A's.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._redact import redact
from ..backends import SessionMeta
from ..background import Detached, FollowJob, Follows, NoticeStatus, RunStart, WorkResult
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
    """Hand `task` (or the answer to `task_id`'s question) over in the
    background of the caller's session; a receipt at once."""
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
    """Follow again the session's remote tasks of this agent without a
    result that no live process follows."""
    await _follows(remote, runtime).resume(start, MODE, _maker(remote), kind=KIND)


async def keep_whole(
    remote: RemoteAgent, runtime: Runtime, ctx: ToolContext, task: str, outcome: Outcome
) -> Outcome:
    """`outcome` of an inline call as the parent's model is told it: an answer
    or question past `max_answer_chars` is cut, its whole text (redacted)
    kept first in a new, ended child session of the caller's, where
    `read_agent(agent=..., offset=...)` reads on."""
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
            # Stopped (by its run, a delete or the runtime's close): the remote
            # task was cancelled on the way out; saying so needs an uncancel.
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
        """`text` as the notice tells it: cut at the agent's cap, the whole kept
        in the child's log before the notice is delivered (a follower after a
        crash tells the one kept). Raises `Detached` when the hold was lost
        before it was kept: the follower that took over keeps it."""
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
