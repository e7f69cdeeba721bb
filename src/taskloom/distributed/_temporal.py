"""`TemporalQueue`: taskloom's queued runs and background children on Temporal.

The store stays the truth: a session's log, its leases and the children's
inbox live where they live without Temporal. Temporal places the work on
workers, retries it when a worker dies (activity heartbeats) and keeps one
workflow per session: `submit_run` and `wake` signal-with-start the
session's workflow (`taskloom-session-<id>`), so a second submit joins the
running one instead of starting a concurrent run; `wait_idle` waits for it to
close, or to wait (open) for the decisions a parked run needs. `dispatch`
starts one workflow per background child (`taskloom-child-<child id>`,
joined while it runs, started again once closed; a child workflow of the
parent's session workflow when the parent runs on a Temporal worker), whose
report reaches the parent through the durable inbox and whose end wakes the
parent. Cancelling a session's workflow (the Temporal
UI, `temporal workflow cancel`) cancels its run, which ends STOPPED; the
workflow then closes, or goes on with demands that came meanwhile.

This module imports temporalio only when it connects, so that a missing
extra is told as a `ConfigurationError` naming the install command.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .._extras import install_command
from ..delegation import ChildSpec
from ..errors import ConfigurationError, StoreUnavailable
from ..loop import RunOptions
from ..runtime import RunDemand
from ._temporal_names import (
    CHILD_SIGNAL,
    CHILD_WORKFLOW,
    DEMAND_SIGNAL,
    SEARCH_ATTRIBUTES,
    SESSION_WORKFLOW,
    SETTLED_UPDATE,
    child_workflow_id,
    session_workflow_id,
)
from ._temporal_schedules import TemporalSchedules
from ._temporal_status import TemporalInspection

if TYPE_CHECKING:
    from temporalio.client import Client

    from ..runtime import Runtime
    from ._temporal_worker import TemporalWorker


RUNNING_SESSION: ContextVar[str | None] = ContextVar("taskloom_temporal_session", default=None)
"""The session whose run activity this task runs in (on a Temporal worker):
a background child its run dispatches becomes a child workflow of its
session's workflow."""


def _ask_again() -> frozenset[Any]:
    from temporalio.service import RPCStatusCode

    return frozenset(
        {
            RPCStatusCode.RESOURCE_EXHAUSTED,
            RPCStatusCode.FAILED_PRECONDITION,  # WorkflowNotReady
            RPCStatusCode.UNAVAILABLE,  # "workflow update was aborted"
        }
    )


def _require_extra() -> None:
    if importlib.util.find_spec("temporalio") is None:
        raise ConfigurationError(
            "TemporalQueue needs the temporal extra (no module named 'temporalio'): "
            + install_command("temporal")
        )


class TemporalQueue(TemporalSchedules, TemporalInspection):
    """taskloom's queued runs and background children as Temporal workflows.

    `target` is a connected `temporalio.client.Client`, or the server's
    address (`host:port`), connected on first use in `namespace`. Workers
    (`worker(runtime)`, or `taskloom worker --temporal ADDRESS`) poll
    `task_queue`. A run's activity heartbeats every `heartbeat_timeout / 3`
    seconds: a worker silent for `heartbeat_timeout` seconds is dead, and its
    activity is retried on another worker, which goes on from the session's
    log (a tool call the dead worker began is answered "interrupted", never
    run again). `run_timeout` bounds one activity (one run, or one child).
    A session's workflow that ran `jobs_per_workflow` activities with more
    demands waiting continues as new, so its history stays short however
    long the session lives. With `search_attributes=True` every workflow
    sets the keyword search attributes `taskloomSession`, `taskloomAgent`
    and `taskloomStatus` (its last activity's end), so the Temporal UI finds
    a session's runs by them; the namespace must have them registered
    (`temporal operator search-attribute create --name taskloomSession
    --type Keyword`, and the same for the others): a worker checks as it
    starts. `schedule`, `schedules` and `cancel_schedule` are `WorkQueue`'s
    scheduled wake-ups, as Temporal schedules (`TemporalSchedules`);
    `status()` counts its workflows and names the workers polling it.
    """

    def __init__(
        self,
        target: Client | str,
        *,
        namespace: str = "default",
        task_queue: str = "taskloom",
        heartbeat_timeout: float = 10.0,
        run_timeout: float = 86400.0,
        jobs_per_workflow: int = 200,
        search_attributes: bool = False,
    ) -> None:
        _require_extra()
        if heartbeat_timeout <= 0 or run_timeout <= 0 or jobs_per_workflow < 1:
            raise ConfigurationError(
                "TemporalQueue needs positive heartbeat and run timeouts and jobs_per_workflow"
            )
        self._client: Client | None = None
        if isinstance(target, str):
            self.address = target
        else:
            self._client = target
            self.address = target.service_client.config.target_host
            namespace = target.namespace
        self.namespace = namespace
        self.task_queue = task_queue
        self.heartbeat_timeout = heartbeat_timeout
        self.run_timeout = run_timeout
        self.jobs_per_workflow = jobs_per_workflow
        self.search_attributes = search_attributes
        self._connecting = asyncio.Lock()

    def __repr__(self) -> str:
        return (
            f"TemporalQueue({self.address!r}, namespace={self.namespace!r}, "
            f"task_queue={self.task_queue!r})"
        )

    async def client(self) -> Client:
        """The Temporal client, connected once (`StoreUnavailable` when the server
        cannot be reached)."""
        async with self._connecting:
            if self._client is None:
                from temporalio.client import Client

                try:
                    self._client = await Client.connect(self.address, namespace=self.namespace)
                except RuntimeError as exc:
                    # What was asked (a submit's input) is in the store already.
                    raise StoreUnavailable(
                        f"the Temporal server at {self.address} cannot be reached "
                        f"(namespace {self.namespace!r}): {exc}"
                    ) from None
            return self._client

    def _limits(self) -> dict[str, float | bool]:
        return {
            "run_timeout": self.run_timeout,
            "heartbeat_timeout": self.heartbeat_timeout,
            "jobs_per_workflow": self.jobs_per_workflow,
            "search": self.search_attributes,
        }

    async def check_search_attributes(self) -> None:
        """`ConfigurationError` unless the namespace has the search attributes
        this queue sets, as keywords (a workflow setting an unknown one would
        stall)."""
        from temporalio.api.enums.v1 import IndexedValueType
        from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

        client = await self.client()
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=self.namespace)
        )
        have = dict(listed.custom_attributes)
        missing = [
            name
            for name in SEARCH_ATTRIBUTES
            if have.get(name) != IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        ]
        if missing:
            creates = "; ".join(
                f"temporal operator search-attribute create --namespace {self.namespace} "
                f"--name {name} --type Keyword"
                for name in missing
            )
            raise ConfigurationError(
                f"TemporalQueue(search_attributes=True): namespace {self.namespace!r} has no "
                f"keyword search attribute {', '.join(missing)}; register them: {creates}"
            )

    async def submit_run(
        self,
        session_id: str,
        demand: RunDemand,
        *,
        reason: str,
        options: RunOptions | None,
        traceparent: str | None = None,
    ) -> str:
        """Signal the session's workflow with the demand, starting it if none runs
        (signal-with-start); the workflow id. Only limits cross in `options`.
        `StoreUnavailable`, naming the server, when it cannot be reached."""
        from ._engine import options_to_json

        args: dict[str, Any] = {
            "reason": reason,
            "explicit": demand.value,
            "options": options_to_json(options),
            "limits": self._limits(),
        }
        if traceparent is not None:
            args["traceparent"] = traceparent
        from temporalio.service import RPCError

        client = await self.client()
        workflow_id = session_workflow_id(session_id)
        try:
            await client.start_workflow(
                SESSION_WORKFLOW,
                id=workflow_id,
                task_queue=self.task_queue,
                start_signal=DEMAND_SIGNAL,
                start_signal_args=[args],
            )
        except RPCError as exc:
            # What was asked (a submit's input) is in the store already.
            raise self._unavailable(exc) from None
        return workflow_id

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(
            f"the Temporal server at {self.address} did not answer "
            f"(namespace {self.namespace!r}): {exc}"
        )

    async def wake(self, session_id: str) -> str:
        """Wake the session (it runs only if something waits for it); the workflow id."""
        return await self.submit_run(session_id, RunDemand.IF_NEEDED, reason="wake", options=None)

    async def wait_idle(self, session_id: str, timeout: float | None) -> None:
        """Return once the session's workflow is closed (or never ran) or waits,
        parked, for decisions; `TimeoutError` after `timeout` seconds,
        `StoreUnavailable` when the server stops answering. Waits on the
        workflow's `settled` update (Temporal's long poll), not by polling."""
        from temporalio.client import (
            WorkflowContinuedAsNewError,
            WorkflowExecutionStatus,
            WorkflowFailureError,
            WorkflowUpdateFailedError,
            WorkflowUpdateRPCTimeoutOrCancelledError,
        )
        from temporalio.service import RPCError, RPCStatusCode

        handle = (await self.client()).get_workflow_handle(session_workflow_id(session_id))
        failed_in: str | None = None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        described = await handle.describe()
                    except RPCError as exc:
                        if exc.status is RPCStatusCode.NOT_FOUND:
                            return
                        raise
                    if described.status is not WorkflowExecutionStatus.RUNNING:
                        return
                    try:
                        settled = await handle.execute_update(SETTLED_UPDATE, result_type=str)
                    except WorkflowUpdateRPCTimeoutOrCancelledError:
                        # The SDK tells a cancel of this call (the timeout
                        # above, or the caller's) as this error too: a
                        # cancel is passed on, only the RPC's own timeout
                        # (no worker answered yet) asks again.
                        task = asyncio.current_task()
                        if task is not None and task.cancelling():
                            raise asyncio.CancelledError from None
                        continue
                    except (WorkflowUpdateFailedError, RPCError) as exc:
                        if isinstance(exc, RPCError) and exc.status in _ask_again():
                            # The server's bound on updates in flight, or an
                            # update aborted by a workflow task that failed
                            # (its worker killed mid-task) or by the server:
                            # ask again in a moment; the next describe tells
                            # a server that is gone.
                            await asyncio.sleep(0.2)
                            continue
                        if isinstance(exc, RPCError) and exc.status is not RPCStatusCode.NOT_FOUND:
                            raise
                        # The run asked ended (continued as new, cancelled):
                        # the next describe sees its successor. A run that
                        # fails the update twice knows no `settled` (started
                        # by an older taskloom): its end is what counts.
                        if failed_in != described.run_id:
                            failed_in = described.run_id
                            continue
                        settled = "closing"
                    if settled == "parked":
                        return
                    # The latest run's end; a run started after it is seen
                    # by the next describe.
                    with contextlib.suppress(WorkflowFailureError, WorkflowContinuedAsNewError):
                        await handle.result(follow_runs=False)
        except TimeoutError:
            raise TimeoutError(f"session {session_id} still has a job after {timeout}s") from None
        except RPCError as exc:
            raise self._unavailable(exc) from None

    async def dispatch(self, spec: ChildSpec) -> None:
        """Start the background child's workflow (returns once Temporal has it)."""
        await self.dispatch_child(spec)

    async def dispatch_child(self, spec: ChildSpec) -> str:
        """Start the child's workflow, or join the one running (its id is the
        child's: a redelivered dispatch never runs the child twice at once);
        the workflow id. A child whose workflow closed is started again in a
        new run of it (its escalated calls decided, it goes on): a child that
        has its report already is not run or reported again (`ChildWorker.run`).

        Dispatched by a run of its parent on a Temporal worker, the child is a
        child workflow of the parent's session workflow (the Temporal UI shows
        it under its parent): the parent's workflow is signalled to start it
        (signal-with-start: a parent workflow closed meanwhile is started for
        it), and the signal, once Temporal has it, is what makes it durable.
        Dispatched from anywhere else (a host's own run), it is a workflow of
        its own."""
        from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

        workflow_id = child_workflow_id(spec.child_session_id)
        client = await self.client()
        args = {"spec": spec.to_dict(), "limits": self._limits()}
        if RUNNING_SESSION.get() == spec.parent_session_id:
            await client.start_workflow(
                SESSION_WORKFLOW,
                id=session_workflow_id(spec.parent_session_id),
                task_queue=self.task_queue,
                start_signal=CHILD_SIGNAL,
                start_signal_args=[args],
            )
            return workflow_id
        await client.start_workflow(
            CHILD_WORKFLOW,
            args,
            id=workflow_id,
            task_queue=self.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        return workflow_id

    async def carries(self, session_id: str) -> bool:
        """Whether a workflow of this session (a child's, or its runs') was ever
        started here (`taskloom.delegation.ChildQueue`)."""
        from temporalio.service import RPCError, RPCStatusCode

        client = await self.client()
        for workflow_id in (child_workflow_id(session_id), session_workflow_id(session_id)):
            try:
                await client.get_workflow_handle(workflow_id).describe()
            except RPCError as exc:
                if exc.status is not RPCStatusCode.NOT_FOUND:
                    raise
                continue
            return True
        return False

    def dispatcher(self) -> TemporalQueue:
        """A `Dispatcher` that puts background children on Temporal (the queue itself)."""
        return self

    def worker(self, runtime: Runtime, *, concurrency: int = 1) -> TemporalWorker:
        """A worker running this queue's activities (and workflows) with `runtime`'s
        agents, tools and models (`await worker.run()`; `worker.drain()` stops it)."""
        from ._temporal_worker import TemporalWorker

        return TemporalWorker(self, runtime, concurrency=concurrency)

    async def close(self) -> None:
        """Forget the client this queue connected (a client passed in stays the caller's)."""
