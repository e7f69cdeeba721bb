"""Remote A2A agents as named subagents: a task handed over the protocol.

Inline by default, like a `SubAgent`: the remote agent sees only the `task`,
its text reaches event subscribers tagged with its origin, and its final
answer returns. In the background (`background=True`) the call answers at
once and the answer arrives as a notice: followed work (mode `remote`)
whose child session keeps the remote task's id, taken up again by any run
of the parent whose tools include the same `RemoteAgent`. A question
(`input-required`) comes back in band with the task's id, which the model
passes to answer it; anything else that goes wrong is an in-band error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import httpx
import pydantic
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client
from a2a.types import SubscribeToTaskRequest

from .._redact import credentials, redact, safe_url
from ..backends import NoticeStatus, SessionMeta
from ..background import Detached, FollowJob, Follows, RunStart, WorkResult
from ..delegation import (
    DEFAULT_MAX_ANSWER_CHARS,
    DelegationTool,
    cap_answer,
    check_answer_cap,
    kept_answer,
    read_on,
)
from ..entries import Entry, MessageEntry, SubagentResult
from ..errors import ConfigurationError
from ..messages import Message
from ..tools import ApprovalRule, Tool, ToolOutput
from ._exchange import (
    Outcome,
    Tries,
    Watch,
    answer_question,
    cancel_task,
    hand_over,
    listen_and_poll,
    why,
)

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ..tools import ToolContext


class _Arguments(pydantic.BaseModel, extra="forbid"):
    """A remote agent tool's arguments: a task, or the answer to a question
    its task asked."""

    task: str = pydantic.Field(
        description=(
            "The complete task: the agent sees nothing else. When you answer a"
            " question the agent asked, your answer."
        )
    )
    task_id: str = pydantic.Field(
        "",
        description=(
            "Only to answer a question the agent asked: the task_id its question"
            " came with. The agent then goes on with that same task."
        ),
    )


class Unreachable(Exception):
    """The agent card could not be read (nothing was sent)."""


class RemoteAgent:
    """An agent served over A2A at `url`, as a subagent: `.tool()` gives a
    parent a tool named `name` that takes `task`, hands it over as a new A2A
    task and answers `{"answer": ..., "task_id": ...}` once it completes, or
    an in-band error. When the remote agent asks for input, the result is
    `{"question": ..., "task_id": ...}`: the parent's model answers by
    calling the tool again with `task_id`, and the same remote task goes on.

    With `background=True` the call answers at once with a receipt and its
    answer (or question, or error) arrives as a notice at a later round,
    exactly once, also after a crash (the session's next run in any process
    with this agent among its tools follows it again). Stopping the run that
    started it, deleting the session or closing the runtime cancels it.

    `timeout` bounds a whole call (a task still running then is cancelled),
    `connect_timeout` each connection; a followed task's server that does
    not answer is tried again for `unreachable_for` seconds; `poll_interval`
    is how often a task whose stream ended early is read. `token` is sent as
    `Authorization: Bearer`, never stored (nor the URL's credentials:
    `public_url`); the answer is cut at `max_answer_chars`, its whole kept in
    a child session where `read_agent(agent=..., offset=...)` reads on.
    `needs_approval` gates the delegation itself. Building one does no I/O.
    """

    def __init__(
        self,
        name: str,
        url: str,
        *,
        description: str,
        token: str | None = None,
        background: bool = False,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        unreachable_for: float = 120.0,
        poll_interval: float = 2.0,
        max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
        needs_approval: ApprovalRule = False,
    ) -> None:
        if not description:
            raise ConfigurationError(
                f"remote agent {name!r} needs a description: the parent model reads it"
            )
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"remote agent {name!r}: {url!r} is not an http(s) URL")
        if min(timeout, connect_timeout, unreachable_for, poll_interval) <= 0:
            raise ConfigurationError(
                f"remote agent {name!r}: timeouts, unreachable_for and poll_interval must be positive"
            )
        self.name = name
        self.url = url
        self.description = description
        self.background = background
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.unreachable_for = unreachable_for
        self.poll_interval = poll_interval
        self.max_answer_chars = check_answer_cap(f"remote agent {name!r}", max_answer_chars)
        self.needs_approval = needs_approval
        self._token = token
        self.public_url = safe_url(url)
        self.secrets = credentials(
            headers={"Authorization": f"Bearer {token}"} if token else {}, urls=(url,)
        )

    def __repr__(self) -> str:
        # Never the token, nor the URL's credentials.
        return f"RemoteAgent({self.name!r}, {self.public_url!r})"

    def tool(self) -> Tool:
        """A delegation tool for a parent agent (a new one each call)."""
        kind = _BackgroundTool if self.background else DelegationTool
        made = kind(
            self.name,
            self.description,
            _Arguments,
            self._delegate,
            needs_approval=self.needs_approval,
        )
        if isinstance(made, _BackgroundTool):
            made.remote = self
        made.secrets = self.secrets
        return made

    async def _delegate(
        self, runtime: Runtime, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolOutput:
        task = arguments["task"].strip()
        task_id = arguments["task_id"].strip()
        if not task:
            return self.error("'task' is empty; describe the complete task for the agent")
        if self.background:
            child_id = await self._follows(runtime).begin(
                ctx,
                _RemoteFollow(self, time.time(), task, task_id),
                mode=MODE,
                kind=KIND,
                name=self.name,
                task=task,
                metadata={"url": self.public_url},
            )
            receipt = {
                "id": child_id,
                "name": self.name,
                "status": "started",
                "note": "The remote agent works in the background; its answer arrives as a"
                " notice at a later round.",
            }
            return ToolOutput(json.dumps(receipt))
        watch = Watch(self.name, ctx.emit, ctx.origin, ctx.session_id, self.secrets)
        try:
            async with self.client() as client:
                outcome = await self.exchange(client, watch, self.timeout, task, task_id)
        except Unreachable as exc:
            return self.error(str(exc))
        watch.finish(outcome)
        outcome = await keep_whole(self, runtime, ctx, task, outcome)
        if outcome.kind not in ("answer", "question"):
            return self.error(outcome.text)
        body = {outcome.kind: outcome.text, "task_id": outcome.task_id}
        return ToolOutput(json.dumps(body, ensure_ascii=False))

    def _follows(self, runtime: Runtime) -> Follows:
        follows = Follows.of(runtime)
        # Deleting a session cancels this agent's remote tasks in it.
        follows.register(MODE, f"{self.name} {self.public_url}", self._followed)
        return follows

    def _followed(
        self, meta: SessionMeta, record: Mapping[str, Any] | None
    ) -> _RemoteFollow | None:
        # Children recorded before URLs were stored without credentials name the raw URL.
        url = meta.metadata.get("url")
        if meta.metadata.get("name") != self.name or url not in (self.public_url, self.url):
            return None
        return _RemoteFollow(self, float(meta.metadata.get("started_at") or meta.created_at))

    def error(self, text: str) -> ToolOutput:
        """An in-band error result naming this agent."""
        return ToolOutput(f"{self.describe()}: {text}", is_error=True)

    def describe(self) -> str:
        """How results name this agent: its name and URL."""
        return f"remote agent {self.name!r} ({self.public_url})"

    @contextlib.asynccontextmanager
    async def client(self, *, patient: bool = False) -> AsyncIterator[Client]:
        """A client for the agent, its card read; `Unreachable` when the card
        cannot be had (`patient`: after trying for `unreachable_for` seconds)."""
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        timeouts = httpx.Timeout(self.timeout, connect=self.connect_timeout)
        async with httpx.AsyncClient(headers=headers, timeout=timeouts) as http:
            config = ClientConfig(httpx_client=http, streaming=True)
            tries = Tries(self.unreachable_for if patient else 0.0)
            while True:
                try:
                    client = await asyncio.wait_for(
                        create_client(self.url, config), self.connect_timeout + 5
                    )
                    break
                except Exception as exc:
                    if not await tries.again():
                        raise Unreachable(
                            f"cannot read its agent card at {self.public_url}: {why(exc)}"
                            + tries.said()
                        ) from None
            async with client:
                yield client

    async def exchange(
        self,
        client: Client,
        watch: Watch,
        timeout: float,
        task: str = "",
        task_id: str = "",
        *,
        follow: str = "",
        record: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> Outcome:
        """Hand `task` over (new, or answering `task_id`'s question), or `follow`
        a task handed over before, to its end within `timeout` seconds (else it
        is cancelled); `record(task id, context id)` is awaited once known."""
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                if follow:
                    watch.started(follow, "")
                    # Its stream (`tasks/subscribe`) beside reading it.
                    stream = client.subscribe(SubscribeToTaskRequest(id=follow))
                    return await listen_and_poll(self, client, watch, stream, "")
                if task_id:
                    return await answer_question(self, client, watch, task_id, task, record)
                return await hand_over(self, client, watch, task, record)
        except TimeoutError:
            await cancel_task(client, watch.task_id)
            return Outcome(
                "failed",
                f"no answer within {self.timeout:g} s; the task was cancelled",
                watch.task_id,
            )
        except asyncio.CancelledError:
            await asyncio.shield(cancel_task(client, watch.task_id))
            raise


class _BackgroundTool(DelegationTool):
    """The tool of a background `RemoteAgent`, which also resumes following."""

    __slots__ = ("remote",)
    remote: RemoteAgent

    async def resume_work(self, start: RunStart) -> None:
        """Follow again the session's remote tasks of this agent nobody follows
        (`taskloom.background.ResumesWork`)."""
        remote = self.remote
        await remote._follows(self.runtime).resume(start, MODE, remote._followed, kind=KIND)


MODE = "remote"
"""The `mode` of a remote task's child session (its metadata and its link)."""

KIND = "remote_agent"
"""The activity kind of a remote task followed in the background."""


async def keep_whole(
    remote: RemoteAgent, runtime: Runtime, ctx: ToolContext, task: str, outcome: Outcome
) -> Outcome:
    """`outcome` as the parent's model is told it: past `max_answer_chars`, cut,
    its whole kept first in a new ended child session (`read_agent` reads on)."""
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
    cut = cap_answer(text, remote.max_answer_chars, read_on(child_id, remote.max_answer_chars))
    await store.append(child_id, Entry.of(SubagentResult("done", cut)))
    return outcome._replace(text=cut)


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
            with contextlib.suppress(Unreachable):
                async with self.remote.client() as client:
                    await cancel_task(client, str(record["task_id"]))

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
        """`text` cut at the agent's cap, the whole kept in the child's log first
        (`Detached` if the hold was lost: the follower that took over keeps it)."""
        limit = self.remote.max_answer_chars
        if len(text) <= limit:
            return text
        kept = kept_answer(await job.runtime.store.load(job.child_id))
        if kept is None:
            await job.append(MessageEntry(Message.assistant(text)))
            if job.lease is None:
                raise Detached()
            kept = text
        return cap_answer(kept, limit, read_on(job.child_id, limit))
