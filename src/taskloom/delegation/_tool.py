"""The delegation tool, and the taking up again of the children it started.

A child whose process died is left started, unended and unheld. At the first
boundary of the parent's next run (in any process), the delegation tools the
run offers take up its unended children as followed work (`Follows.resume`:
the one take-over rule, so two processes never both run it), run on from the
log (`FollowedChild`). A child parked on calls it escalated goes on once all
are decided, in whatever process decides the last (`DecidedChildren`).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

import pydantic

from ..agent import Agent
from ..backends import SessionMeta
from ..background import Follows, RunStart
from ..entries import Entry, SubagentDispatched, SubagentStartedEntry
from ..errors import ConfigurationError, UsageError
from ..log import SessionLog
from ..runtime import Runtime
from ..tools import ApprovalRule, Tool, ToolEffect, ToolOutput
from ._children import CHILD_LEASE, ChildStatus, terminal_entry
from ._dispatch import ChildSpec, ChildWorker, FollowedChild, registration

if TYPE_CHECKING:
    from ..tools import ToolContext

logger = logging.getLogger("taskloom")

Handler: TypeAlias = "Callable[[Runtime, dict[str, Any], ToolContext], Awaitable[ToolOutput]]"
"""What a delegation tool runs: given the runtime it is bound to, the call's
validated arguments and its context, the call's result."""


def _offered(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` as the model is shown it: no titles, defaults or description
    of its own (the tool's says what it does), in the usual key order."""
    properties = {
        name: {k: v for k, v in field.items() if k not in ("title", "default")}
        for name, field in schema["properties"].items()
    }
    shown: dict[str, Any] = {"type": "object", "properties": properties}
    if "required" in schema:
        shown["required"] = schema["required"]
    shown |= {k: v for k, v in schema.items() if k not in ("title", "description", *shown)}
    return shown


class DelegationTool(Tool):
    """A tool that runs child agents; delegation calls of one turn run concurrently.
    `child_agent` is the agent its children run (a `SubAgent`'s), if it has one:
    with it a background child of this tool is taken up again after a crash.

    The tool runs bound to the runtime offering it (`bind_runtime`): the bound
    copy calls `handler` with that runtime. `arguments`, a pydantic model with
    `extra="forbid"`, is both the schema the model is shown (without titles
    and defaults) and what validates the calls the handler gets.
    """

    __slots__ = ("__weakref__", "_handler", "_runtime", "child_agent")

    def __init__(
        self,
        name: str,
        description: str,
        arguments: type[pydantic.BaseModel],
        handler: Handler,
        *,
        needs_approval: ApprovalRule = False,
        child_agent: Agent | None = None,
    ) -> None:
        if not (isinstance(arguments, type) and issubclass(arguments, pydantic.BaseModel)):
            raise ConfigurationError(
                f"tool {name!r}: arguments must be a pydantic model class, not {arguments!r}"
            )
        if arguments.model_config.get("extra") != "forbid":
            # Validated calls must hold exactly the declared fields.
            raise ConfigurationError(f"tool {name!r}: its arguments model needs extra='forbid'")
        super().__init__(
            name,
            description,
            _offered(arguments.model_json_schema()),
            effect=ToolEffect.WRITE,
            needs_approval=needs_approval,
            concurrent=True,
            max_output_chars=0,
            _arguments_model=arguments,
        )
        self._handler = handler
        self._runtime: Runtime | None = None
        self.child_agent = child_agent

    def bind_runtime(self, runtime: Runtime) -> DelegationTool:
        """A copy of this tool that runs its children on `runtime`."""
        bound = copy.copy(self)
        bound._runtime = runtime
        DecidedChildren.of(runtime)
        return bound

    @property
    def runtime(self) -> Runtime:
        """The runtime this copy is bound to (`UsageError` for an unbound tool)."""
        if self._runtime is None:
            raise UsageError(
                f"tool {self.name!r} runs only as a runtime offers it (in one of its sessions)"
            )
        return self._runtime

    async def invoke(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        """Run the delegation with the validated arguments, on the bound runtime."""
        return await self._handler(self.runtime, arguments, ctx)

    async def resume_work(self, start: RunStart) -> None:
        """Take up the session's background children that nobody runs, each by a
        `FollowedChild` run on from its log (`Follows.resume`). One never started
        is left to its queue, one parked on undecided calls to the decision
        (`DecidedChildren`), and one this runtime cannot rebuild to a process
        that can."""
        if "delegation" in start.claimed:
            return
        start.claimed.add("delegation")
        worker = ChildWorker(self.runtime)

        def make(meta: SessionMeta, record: Mapping[str, Any] | None) -> FollowedChild | None:
            if record is None:
                return None
            spec = ChildSpec.from_dict(record)
            try:
                return FollowedChild(worker, spec, _agent_for(worker, spec, start.offered))
            except ConfigurationError as exc:
                logger.info(
                    "background child %s of session %s is interrupted; "
                    "this runtime cannot run it on (%s)",
                    meta.id,
                    start.session_id,
                    exc,
                )
                return None

        follows = Follows.of(self.runtime)
        for mode in ("background", "inline"):
            # The run that takes a child up did not start it: its report comes
            # at a later round, however this run ends.
            await follows.resume(start, mode, make, kind="subagent", when=_resumable, remind=False)


def _resumable(entries: list[Entry]) -> bool:
    """Whether a child is to run on: dispatched, started, and not parked on undecided calls."""
    if not any(isinstance(e.payload, SubagentDispatched) for e in entries):
        return False
    if not any(isinstance(e.payload, SubagentStartedEntry) for e in entries):
        return False
    log = SessionLog.folded(entries)
    return not (log.parked() and log.undecided_calls())


@runtime_checkable
class ChildQueue(Protocol):
    """A work queue that takes a decided child from a process that cannot run it
    (`DecidedChildren.use_queue`; `taskloom.distributed.WorkQueue` is one)."""

    async def dispatch_child(self, spec: ChildSpec) -> str:
        """Queue the child (or join its job still waiting); the job id."""
        ...

    async def carries(self, child_id: str) -> bool:
        """Whether the child ran on this queue (so its workers can run it on)."""
        ...


@dataclass(slots=True)
class ChildHandover:
    """Where a child goes on once its escalated calls are all decided
    (`DecidedChildren.handover`). `where` is `"queue"` (a worker runs it on;
    `detail` is the job id), `"here"` (a task of this process runs it on;
    `status` once that ended, `error` if it could not), `"next run"` (no
    process here can: the parent's next run takes it up; `detail` says why),
    `"parent"` (an inline escalation: the parent's resume runs it on) or
    `"ended"` (nothing to do).
    """

    child_id: str
    parent_id: str
    where: str
    detail: str = ""
    status: ChildStatus | None = None
    error: str | None = None


class DecidedChildren:
    """Goes on, on one runtime, with children whose escalated calls are all
    decided: on the runtime's queue if it has one, else there and then when
    this runtime can run the child's tools, else on the `use_queue` queue it
    ran on, else at its parent's next run; `handover(child_id)` says which.
    `DecidedChildren.of(runtime)` registers it, once (a bound delegation tool,
    the `taskloom` command and an acting console do); without it a decided
    child waits for its parent's next run."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._queue: ChildQueue | None = None
        self._handovers: dict[str, ChildHandover] = {}
        runtime.background.on_decided(self.resume)

    @classmethod
    def of(cls, runtime: Runtime) -> DecidedChildren:
        """The runtime's one (registering it on first use)."""
        return runtime.service(cls, cls)

    def use_queue(self, queue: ChildQueue) -> None:
        """Hand to `queue` the decided children that ran on it and that this
        runtime cannot run."""
        self._queue = queue

    def handover(self, child_id: str) -> ChildHandover | None:
        """How the child was handed over by the latest decision through this
        runtime (None: no decision here went on with it)."""
        return self._handovers.get(child_id)

    async def resume(self, session_id: str, offered: Mapping[str, Tool]) -> None:
        """Go on with `session_id` if it is a dispatched child; `offered` are the
        deciding session's tools, where its agent is looked for first. Without a
        queue it runs in a task, so whoever decided is not held up."""
        runtime = self.runtime
        meta = await runtime.store.get(session_id)
        if meta.parent_id is None:
            return
        entries = await runtime.store.load(session_id)
        specs = [e.payload.spec for e in entries if isinstance(e.payload, SubagentDispatched)]
        if not specs:
            return
        spec = ChildSpec.from_dict(specs[0])
        handover = self._handovers[session_id] = ChildHandover(session_id, meta.parent_id, "")
        if terminal_entry(entries) is not None:
            handover.where = "ended"
            return
        parent = SessionLog.folded(await runtime.store.load(meta.parent_id))
        if session_id in parent.held_calls().values():
            # An inline escalation: the parent's turn is parked on the call
            # that waits on the child, and the parent's resume runs it on.
            handover.where = "parent"
            return
        # A work queue that carries children (taskloom.distributed's) hands it to a worker.
        dispatch = getattr(runtime.queue, "dispatch_child", None)
        if dispatch is not None:
            handover.where, handover.detail = "queue", str(await dispatch(spec))
            return
        worker = ChildWorker(runtime)
        try:
            agent = _agent_for(worker, spec, offered)
        except ConfigurationError as exc:
            cannot = str(exc)
        else:
            handover.where = "here"
            runtime.background.keep(self._run_here(handover, worker, spec, agent))
            return
        queue = self._queue
        if queue is not None and await queue.carries(session_id):
            handover.where, handover.detail = "queue", await queue.dispatch_child(spec)
            return
        # The parent's next run takes up the children registered under it
        # (`DelegationTool.resume_work`); the registration the child's runner kept may
        # have lapsed while it waited for the decision.
        registered = registration(
            spec.child_session_id, spec.name, spec.task, spec.parent_run_id, mode="background"
        )
        await runtime.background.registry.add(meta.parent_id, registered, WAITS_FOR_PARENT)
        handover.where, handover.detail = "next run", cannot

    async def _run_here(
        self, handover: ChildHandover, worker: ChildWorker, spec: ChildSpec, agent: Agent
    ) -> None:
        try:
            # The runner that parked it may still hold its lease for a moment.
            handover.status = await worker.run(spec, agent=agent, wait=CHILD_LEASE)
        except Exception as exc:
            logger.exception("going on with child %s failed", spec.child_session_id)
            handover.error = f"{type(exc).__name__}: {exc}"


WAITS_FOR_PARENT = 30 * 24 * 3600.0
"""Seconds a decided child stays registered under its parent for the
parent's next run to take it up, when the deciding process could not."""


def _agent_for(worker: ChildWorker, spec: ChildSpec, offered: Mapping[str, Tool]) -> Agent:
    """The agent of the `SubAgent` that started the child, from `offered` or the
    runtime's agents, else rebuilt from the registries (`ConfigurationError`)."""
    for tools in (offered, *(a.tool_map for a in worker.runtime.agents.values())):
        tool = tools.get(spec.type or "")
        if isinstance(tool, DelegationTool) and tool.child_agent is not None:
            return tool.child_agent
    return worker.build_agent(spec)
