"""Remote A2A agents as named subagents: a task handed over the protocol.

Inline by default, like a `SubAgent`: the parent model calls a tool named
after the remote agent with a `task`, which is all the remote agent sees;
its text as it works reaches event subscribers tagged with its origin, and
only its final answer returns. In the background (`background=True`) the
call answers at once and the answer arrives as a notice (see `_follow`).

A remote agent that asks for input (`input-required`) asks the parent's
model: the question comes back in band with the task's id, and the model
answers by calling the tool again with that `task_id`. Everything else that
can go wrong becomes an in-band error result, never an exception out of the
run. Handing over and following is `_exchange`; what the task says is `_watch`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import httpx
import pydantic
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client

from .._redact import credentials, safe_url
from ..delegation import DEFAULT_MAX_ANSWER_CHARS, DelegationTool, check_answer_cap
from ..errors import ConfigurationError
from ..tools import ApprovalRule, Tool, ToolOutput
from ._exchange import Tries, answer_question, cancel_task, hand_over, resubscribe, why
from ._watch import Outcome, Watch

if TYPE_CHECKING:
    from ..background import RunStart
    from ..runtime import Runtime
    from ..tools import ToolContext

__all__ = ["RemoteAgent"]


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

    With `background=True` the call answers at once with a receipt and the
    remote task is followed in the background of the parent's session: its
    answer (or question, or error) arrives as a notice at a later round,
    exactly once. Its id is kept in the parent's store as soon as it is
    known, so after a crash the session's next run in any process (with
    this agent among its tools) follows it again. Stopping the run that
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
        made: Tool
        if self.background:
            made = _BackgroundTool(self)
        else:
            made = DelegationTool(
                self.name,
                self.description,
                _Arguments,
                self._delegate,
                needs_approval=self.needs_approval,
            )
        made.secrets = self.secrets
        return made

    # ------------------------------------------------------------ a call

    async def _delegate(
        self, runtime: Runtime, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolOutput:
        task = arguments["task"].strip()
        task_id = arguments["task_id"].strip()
        if not task:
            return self.error("'task' is empty; describe the complete task for the agent")
        from ._follow import keep_whole, start_following

        if self.background:
            return await start_following(self, runtime, ctx, task, task_id)
        watch = Watch(self.name, ctx.emit, ctx.origin, ctx.session_id, self.secrets)
        try:
            async with self.client() as client:
                outcome = await self.exchange(client, watch, self.timeout, task, task_id)
        except Unreachable as exc:
            return self.error(str(exc))
        watch.finish(outcome)
        return self._tool_output(await keep_whole(self, runtime, ctx, task, outcome))

    def _tool_output(self, outcome: Outcome) -> ToolOutput:
        if outcome.kind == "answer":
            body = {"answer": outcome.text, "task_id": outcome.task_id}
        elif outcome.kind == "question":
            body = {"question": outcome.text, "task_id": outcome.task_id}
        else:
            return self.error(outcome.text)
        return ToolOutput(json.dumps(body, ensure_ascii=False))

    def error(self, text: str) -> ToolOutput:
        """An in-band error result naming this agent."""
        return ToolOutput(f"{self.describe()}: {text}", is_error=True)

    def describe(self) -> str:
        """How results name this agent: its name and URL."""
        return f"remote agent {self.name!r} ({self.public_url})"

    # ------------------------------------------------------------ the protocol

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
        """Hand `task` over (a new task, or the answer to `task_id`'s question),
        or `follow` a task handed over before, to its end within `timeout`
        seconds (then, or when the caller is cancelled, the task is cancelled
        over there). `record(task id, context id)` is awaited once the id is known."""
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                if follow:
                    watch.started(follow, "")
                    return await resubscribe(self, client, watch, follow)
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

    def __init__(self, remote: RemoteAgent) -> None:
        super().__init__(
            remote.name,
            remote.description,
            _Arguments,
            remote._delegate,
            needs_approval=remote.needs_approval,
        )
        self.remote = remote

    async def resume_work(self, start: RunStart) -> None:
        """Follow again the session's remote tasks of this agent nobody follows
        (`taskloom.background.ResumesWork`)."""
        from ._follow import resume_following

        await resume_following(self.remote, self.runtime, start)
