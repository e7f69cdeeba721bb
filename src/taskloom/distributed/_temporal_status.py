"""What a `TemporalQueue` holds, as `taskloom queue status --temporal` shows it.

Temporal's visibility counts the queue's workflows on its task queue by
type and execution status (`count_workflows ... GROUP BY ExecutionStatus`,
one query per type), and `DescribeTaskQueue` names the workers polling it
(for workflow tasks and for activities) with the time of their last poll.
Visibility is eventually consistent: a workflow that has just ended may be
counted as running for a moment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..errors import StoreUnavailable
from ._temporal_names import (
    CHILD_WORKFLOW,
    FIRING_WORKFLOW,
    SESSION_WORKFLOW,
    child_workflow_id,
    session_workflow_id,
)

if TYPE_CHECKING:
    from temporalio.client import Client

WORKFLOW_KINDS = {SESSION_WORKFLOW: "run", CHILD_WORKFLOW: "child", FIRING_WORKFLOW: "schedule"}
"""The queue's workflow types, by the kind `taskloom queue status` names them."""


@dataclass(frozen=True, slots=True)
class TemporalPoller:
    """A worker polling the task queue: its `identity` (pid@host), the seconds
    since its last poll, and what it polls for (`workflows`, `activities`)."""

    identity: str
    age: float
    polls: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TemporalStatus:
    """What a `TemporalQueue` holds: its workflows counted by (kind, status) —
    kinds `run` (a session's), `child` and `schedule` (a firing); statuses as
    Temporal names them (`Running`, `Completed`, `Failed`, ...) — and the
    workers polling its task queue."""

    task_queue: str
    workflows: Mapping[tuple[str, str], int]
    pollers: tuple[TemporalPoller, ...]


class TemporalInspection:
    """`TemporalQueue.status()` (see the module docstring) and `workflow_id()`."""

    namespace: str
    task_queue: str

    async def client(self) -> Client:
        raise NotImplementedError

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        raise NotImplementedError

    def workflow_id(self, session_id: str, *, background_child: bool = False) -> str:
        """The id of the Temporal workflow that runs the session's queued runs
        (`taskloom-session-<id>`), or with `background_child` the one that
        runs it as a background child (`taskloom-child-<id>`): what to look
        for in the Temporal UI. Nothing is asked of the server."""
        if background_child:
            return child_workflow_id(session_id)
        return session_workflow_id(session_id)

    async def status(self) -> TemporalStatus:
        """The queue's workflows by kind and status, and the workers polling its
        task queue (`StoreUnavailable` when the server does not answer)."""
        from temporalio.api.enums.v1 import TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
        from temporalio.service import RPCError

        client = await self.client()
        workflows: dict[tuple[str, str], int] = {}
        polls: dict[str, tuple[float, list[str]]] = {}
        now = datetime.now(UTC)
        try:
            for workflow_type, kind in WORKFLOW_KINDS.items():
                counted = await client.count_workflows(
                    f"WorkflowType = '{workflow_type}' AND TaskQueue = '{_quoted(self.task_queue)}' "
                    "GROUP BY ExecutionStatus"
                )
                for group in counted.groups:
                    status = str(group.group_values[0]) if group.group_values else "?"
                    workflows[(kind, status)] = group.count
            for queue_type, what in (
                (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, "workflows"),
                (TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY, "activities"),
            ):
                described = await client.workflow_service.describe_task_queue(
                    DescribeTaskQueueRequest(
                        namespace=self.namespace,
                        task_queue=TaskQueue(name=self.task_queue),
                        task_queue_type=queue_type,
                    )
                )
                for poller in described.pollers:
                    seen = poller.last_access_time.ToDatetime(tzinfo=UTC)
                    age = max(0.0, (now - seen).total_seconds())
                    before = polls.get(poller.identity, (age, []))
                    polls[poller.identity] = (min(age, before[0]), [*before[1], what])
        except RPCError as exc:
            raise self._unavailable(exc) from None
        pollers = tuple(
            TemporalPoller(identity, age, tuple(what))
            for identity, (age, what) in sorted(polls.items())
        )
        return TemporalStatus(self.task_queue, workflows, pollers)


def _quoted(text: str) -> str:
    """`text` inside a visibility query's single quotes."""
    return text.replace("\\", "\\\\").replace("'", "\\'")
