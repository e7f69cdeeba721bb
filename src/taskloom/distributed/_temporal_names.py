"""The Temporal engine's names: workflows, activities, signals and ids (no imports)."""

from __future__ import annotations

RUN_ACTIVITY = "taskloom.run_session"
"""Bring a session up to date from its log (the body of the procrastinate `taskloom.run` job)."""

CHILD_ACTIVITY = "taskloom.run_child"
"""Run a background child from its spec."""

SESSION_WORKFLOW = "taskloom.session"
"""A session's queued runs (one workflow per session at a time)."""

CHILD_WORKFLOW = "taskloom.child"
"""A background child (one workflow per child at a time: a dispatch joins the
running one, and starts a new run of it once the previous one closed)."""

DEMAND_SIGNAL = "demand"
"""A submit, resume or wake-up of a session, sent to its workflow."""

CHILD_SIGNAL = "child"
"""A background child to start as a child workflow of the session's workflow
(sent by a run of that session on a Temporal worker)."""

SETTLED_UPDATE = "settled"
"""An update a session's workflow answers once it has nothing to run: "parked"
while it waits for the decisions of a parked run, "closing" as it ends (what
`TemporalQueue.wait_idle` waits for)."""

PARKED = "awaiting_approval"
"""The status an activity returns for a session whose run waits for decisions
(`RunStatus.AWAITING_APPROVAL`'s value): its workflow stays open, waiting."""

SEARCH_ATTRIBUTES = ("taskloomSession", "taskloomAgent", "taskloomStatus")
"""The keyword search attributes a queue with `search_attributes=True` sets:
the session's id, its agent, and how its last activity ended."""

SESSION_PREFIX = "taskloom-session-"
CHILD_PREFIX = "taskloom-child-"


def session_workflow_id(session_id: str) -> str:
    """The id of the session's workflow."""
    return SESSION_PREFIX + session_id


def child_workflow_id(child_session_id: str) -> str:
    """The id of a background child's workflow."""
    return CHILD_PREFIX + child_session_id


FIRING_WORKFLOW = "taskloom.schedule_firing"
"""One firing of a scheduled wake-up (started by its Temporal schedule)."""

FIRE_ACTIVITY = "taskloom.fire_schedule"
"""Write a firing's input as steering (once) and wake the session."""

SCHEDULE_PREFIX = "taskloom-schedule-"
FIRING_PREFIX = "taskloom-firing-"
