"""The Temporal engine's workflows: ids and small dicts only, deterministic.

Temporal replays workflow code from its history, in a sandbox that imports
the workflow's module afresh, so this module imports nothing but
temporalio, the standard library and the engine's names, and its workflows
carry ids and limits, never a transcript: the session's log in the store is
the truth, the activities (`_temporal_worker`) read and write it.

`SessionWorkflow` (one per session, id `taskloom-session-<id>`) takes
demands as `demand` signals (signal-with-start: a second submit joins the
running workflow) and runs the `taskloom.run_session` activity for what
waits, again while more came meanwhile, then ends. A run that parks for
decisions ends its activity, and the workflow stays open waiting for the
next demand (the resume a decision sends), then runs the activity again;
the `settled` update answers once the workflow has nothing to run (parked,
or ending). After
`jobs_per_workflow` activities it continues as new with the demands still
waiting. Cancelled, it waits for its activity to end (the run cancelled,
STOPPED in the log), then continues as new with the demands that came
before or during the cancel, or closes cancelled when none did.
`ChildWorkflow` (one per background child at a time, id
`taskloom-child-<child id>`) runs `taskloom.run_child`.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, CancelledError, WorkflowAlreadyStartedError

from ._temporal_names import (
    CHILD_ACTIVITY,
    CHILD_PREFIX,
    CHILD_SIGNAL,
    CHILD_WORKFLOW,
    DEMAND_SIGNAL,
    PARKED,
    RUN_ACTIVITY,
    SEARCH_ATTRIBUTES,
    SESSION_PREFIX,
    SESSION_WORKFLOW,
    SETTLED_UPDATE,
)

NOT_RETRIED = ["Malformed", "ConfigurationError", "Failed"]

SETTLED_PER_RUN = 500
"""`settled` updates a parked run of the session workflow answers before it
goes on waiting in a new run (Temporal bounds the updates of one run)."""
"""Activity failures a retry would not cure (the run recorded its own failure)."""


def activity_retry() -> RetryPolicy:
    """Retried until done: a dead worker's attempt, a session held elsewhere
    (backing off to 10 s) or taken over; never what `NOT_RETRIED` names."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=0.25),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=10),
        maximum_attempts=0,
        non_retryable_error_types=NOT_RETRIED,
    )


def limits_of(demands: list[dict[str, Any]]) -> dict[str, Any]:
    """The queue's limits the first of `demands` carries (its defaults without)."""
    given = demands[0].get("limits") if demands else None
    return given or {"run_timeout": 86400, "heartbeat_timeout": 10, "jobs_per_workflow": 200}


def _timeouts(limits: dict[str, Any]) -> dict[str, Any]:
    return {
        "start_to_close_timeout": timedelta(seconds=float(limits["run_timeout"])),
        "heartbeat_timeout": timedelta(seconds=float(limits["heartbeat_timeout"])),
        "retry_policy": activity_retry(),
        # A cancelled workflow closes once its run ended (STOPPED in the log).
        "cancellation_type": workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    }


def findable(limits: dict[str, Any], session_id: str, outcome: dict[str, Any]) -> None:
    """Set the workflow's search attributes (session, agent, status) when the
    queue asked for them: what the Temporal UI finds a session's runs by."""
    if not limits.get("search"):
        return
    values = (session_id, str(outcome.get("agent") or ""), str(outcome.get("status") or ""))
    workflow.upsert_search_attributes(
        [
            SearchAttributeKey.for_keyword(key).value_set(value)
            for key, value in zip(SEARCH_ATTRIBUTES, values, strict=True)
        ]
    )


def merged(demands: list[dict[str, Any]]) -> dict[str, Any]:
    """One activity's worth of queued demands: every demand of a session means
    "bring it up to date", so they coalesce; one asking for a run anyway wins
    (with its options and trace), else the first one's."""
    always = [d for d in demands if d.get("explicit")]
    chosen = dict(always[0] if always else demands[0])
    chosen["explicit"] = bool(always)
    # A demand whose run a drain cut makes the next activity go on with it.
    chosen["drained"] = any(d.get("drained") for d in demands)
    return chosen


LIMITS = ("run_timeout", "heartbeat_timeout", "jobs_per_workflow")


def malformed(demand: Any) -> str | None:
    """What makes `demand` one taskloom did not write (None: nothing): a
    signal from elsewhere must not stall the workflow on bad limits."""
    if not isinstance(demand, dict):
        return f"not an object: {demand!r}"[:300]
    if not isinstance(demand.get("explicit"), bool):
        return "'explicit' must be a boolean"
    for name in ("reason", "traceparent"):
        if not isinstance(demand.get(name, ""), str):
            return f"{name!r} must be a string"
    if not isinstance(demand.get("options") or {}, dict):
        return "'options' must be an object"
    limits = demand.get("limits")
    if limits is None:
        return None
    if not isinstance(limits, dict):
        return "'limits' must be an object"
    for name in LIMITS:
        value = limits.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            return f"limits.{name} must be a positive number, got {value!r}"[:300]
    return None


FAILURES_KEPT = 5
"""Failures a session workflow's result quotes (the latest; each cut to 300
characters): the result stays far below Temporal's payload limit however
many activities the workflow ran."""


def tally(done: dict[str, Any], status: str, failure: str | None = None) -> None:
    """Count an activity's end in a workflow's result (`failure`: why it failed)."""
    done["jobs"] += 1
    done["ended"][status] = done["ended"].get(status, 0) + 1
    if failure is not None:
        done["failures"] = [*done["failures"], failure[:300]][-FAILURES_KEPT:]


def backoff(agains: int) -> timedelta | None:
    """How long to wait before the activity a drain handed back runs again for
    the `agains`-th time in a row: not at all the first time (another worker
    takes it), then 0.25 s doubling up to 10 s (every worker is draining)."""
    if agains < 2:
        return None
    return timedelta(seconds=min(0.25 * 2 ** (agains - 2), 10.0))


@workflow.defn(name=SESSION_WORKFLOW)
class SessionWorkflow:
    """A session's queued runs: the activity runs while demands wait; a run
    that parked keeps the workflow open until the next demand; then it ends."""

    def __init__(self) -> None:
        self.waiting: list[dict[str, Any]] = []
        self.jobs = 0
        self.parked = False
        self.closing = False
        self.children = 0
        self.starting = 0
        self.answered = 0  # `settled` updates this run answered

    @workflow.signal(name=DEMAND_SIGNAL)
    def demand(self, demand: dict[str, Any]) -> None:
        """A submit, resume or wake-up of the session (one not taskloom's is
        dropped, logged)."""
        problem = malformed(demand)
        if problem is not None:
            workflow.logger.warning("dropped a malformed demand: %s", problem)
            return
        # Merged as they come: a session woken a thousand times during one
        # long run keeps one demand waiting, not a thousand.
        self.waiting = [merged([*self.waiting, demand])]

    @workflow.signal(name=CHILD_SIGNAL)
    async def child(self, args: dict[str, Any]) -> None:
        """Start a background child of this session as a child workflow (id
        `taskloom-child-<child id>`, abandoned rather than ended with this
        workflow: a continue-as-new or an end here does not touch it). A child
        whose workflow still runs is left to it (a second start is refused)."""
        spec = args.get("spec") if isinstance(args, dict) else None
        child_id = spec.get("child_session_id") if isinstance(spec, dict) else None
        if not isinstance(child_id, str) or not child_id:
            workflow.logger.warning("dropped a malformed child signal")
            return
        self.children += 1
        self.starting += 1
        try:
            await workflow.start_child_workflow(
                CHILD_WORKFLOW,
                args,
                id=CHILD_PREFIX + child_id,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            )
        except WorkflowAlreadyStartedError:
            pass  # its workflow runs: it goes on there
        finally:
            self.starting -= 1

    @workflow.update(
        name=SETTLED_UPDATE, unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON
    )
    async def settled(self) -> str:
        """Answer once nothing is left to run: "parked" (a parked run's
        workflow waiting for its decisions) or "closing" (the workflow ends)."""
        await workflow.wait_condition(lambda: self.closing or (self.parked and not self.waiting))
        self.answered += 1
        return "closing" if self.closing else "parked"

    async def _children_started(self) -> None:
        """Wait for the child workflows being started: a run of this workflow
        that ends first would leave a child's start undone."""
        await workflow.wait_condition(lambda: self.starting == 0)

    async def _await_decisions(self) -> None:
        """Wait, open, for the next demand: the resume a decision sends (or any
        other), however long a person takes. Cancelled meanwhile, the workflow
        closes cancelled: there is no run to stop."""
        self.parked = True
        try:
            # Each `wait()` of a host is an update in this run's history: a
            # session parked for days, asked often, goes on waiting in a new
            # run of this workflow before its history grows long.
            await workflow.wait_condition(
                lambda: bool(self.waiting) or self.answered >= SETTLED_PER_RUN
            )
            if not self.waiting:
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self.waiting:
                    workflow.continue_as_new(args=[[], True])
        except asyncio.CancelledError:
            # A demand that raced the cancel goes on, as after a cancelled run.
            await self._children_started()
            if self.waiting:
                workflow.continue_as_new(args=[self.waiting])
            raise
        finally:
            self.parked = False

    async def _close(self, done: dict[str, Any]) -> dict[str, Any]:
        """End, once the children being started are (and `settled` answered);
        a demand that came meanwhile goes on in a new run of this workflow."""
        self.closing = True
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self.waiting:
            workflow.continue_as_new(args=[self.waiting])
        return done

    @workflow.run
    async def run(
        self, carried: list[dict[str, Any]] | None = None, parked: bool = False
    ) -> dict[str, Any]:
        """Run the session's activity for each batch of waiting demands; how many
        ran, how they ended (by status, and the latest failures).
        `carried`: the demands a previous run of this workflow handed on;
        `parked`: that run was waiting for decisions, and this one goes on waiting."""
        done: dict[str, Any] = {"jobs": 0, "ended": {}, "failures": []}
        if carried:
            self.waiting = [merged([*carried, *self.waiting])]
        if parked and not self.waiting:
            await self._await_decisions()
        # Signal-with-start delivers the first demand with the start; the
        # bound only ends a workflow started without one.
        try:
            await workflow.wait_condition(
                lambda: bool(self.waiting) or self.children > 0, timeout=timedelta(seconds=30)
            )
        except TimeoutError:
            return await self._close(done)
        if not self.waiting:
            return await self._close(done)  # started (by a signal) for a child only
        info = workflow.info()
        batch: dict[str, Any] | None = None
        agains = 0
        while self.waiting or batch is not None:
            pending = ([] if batch is None else [batch]) + self.waiting
            if self.jobs >= int(limits_of(pending).get("jobs_per_workflow", 200)):
                # Temporal's history of one run stays short: the demands
                # still waiting (a drained run's with them) go on in a new
                # run of this workflow (once the children being started are).
                await self._children_started()
                pending = ([] if batch is None else [batch]) + self.waiting
                workflow.continue_as_new(args=[[merged(pending)]])
            if batch is None:
                batch = merged(self.waiting)
                self.waiting = []
            limits = limits_of([batch])
            self.jobs += 1
            args = {
                **batch,
                "session_id": info.workflow_id.removeprefix(SESSION_PREFIX),
                "job": f"{info.workflow_id}/{info.run_id}#{self.jobs}",
            }
            args.pop("limits", None)
            if limits.get("search"):
                args["search"] = True  # the activity says the session's agent
            try:
                outcome = await workflow.execute_activity(RUN_ACTIVITY, args, **_timeouts(limits))
            except ActivityError as exc:
                if isinstance(exc.cause, CancelledError):
                    # A cancel stops the run in flight, not what was asked
                    # meanwhile: demands that came before or during it run
                    # in a new run of this workflow (the cancel is not
                    # carried over to it).
                    await self._children_started()
                    if self.waiting:
                        workflow.continue_as_new(args=[self.waiting])
                    raise
                # Failed for good (recorded in the log where it could be);
                # demands that came meanwhile still run.
                tally(done, "failed", str(exc.cause or exc))
                batch, agains = None, 0
                continue
            tally(done, str(outcome.get("status"))[:100])
            findable(limits, args["session_id"], outcome)
            # A worker that stopped to shut down hands the same demand on
            # (`drained`: its run was cut, the next one goes on with it).
            if not outcome.get("again"):
                batch, agains = None, 0
                if outcome.get("status") == PARKED and not self.waiting:
                    # The run parked (or still waits): the workflow stays
                    # open until a decision's resume (a demand) comes.
                    await self._await_decisions()
                continue
            batch = {**batch, "drained": bool(outcome.get("drained"))}
            agains += 1
            wait = backoff(agains)
            if wait is not None:
                try:
                    await workflow.sleep(wait)
                except asyncio.CancelledError:
                    # Cancelled between runs: no run to stop, the demands
                    # waiting go on as after a cancelled run.
                    await self._children_started()
                    if self.waiting:
                        workflow.continue_as_new(args=[self.waiting])
                    raise
        return await self._close(done)


@workflow.defn(name=CHILD_WORKFLOW)
class ChildWorkflow:
    """A background child: its activity runs the child from its spec to its report."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> dict[str, Any]:
        """Run the child; its status."""
        limits = limits_of([args])
        args.pop("limits", None)
        info = workflow.info()
        args["job"] = f"{info.workflow_id}/{info.run_id}#1"
        outcome = await workflow.execute_activity(CHILD_ACTIVITY, args, **_timeouts(limits))
        findable(limits, str(args["spec"].get("child_session_id")), outcome)
        return dict(outcome)
