"""Taking up background children whose process died.

A background child runs under its own lease; when the process running it
dies, the child is left started, unended and unheld, and its registration
under the parent lives on until its lease runs out. At the first boundary of
the parent's next run (in any process), each delegation tool the run offers
takes up (`ResumesWork`, once for all of them) the parent's children still
registered as running: each that no live holder runs is run on from its log
by a `ChildWorker`, which takes its lease (so two processes never both run
it), and its report reaches the parent's inbox once.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from ..agent import Agent
from ..background import BackgroundActivity, BackgroundService, RunStart
from ..entries import SubagentDispatched, SubagentStartedEntry
from ..errors import ConfigurationError
from ..runtime import Runtime
from ..tools import Tool
from ._children import CHILD_LEASE, LiveChildren
from ._dispatch import ChildSpec, ChildWorker
from ._subagent import DelegationTool

__all__ = ["recover_children", "resume_children", "resume_decided_child"]

logger = logging.getLogger("taskloom")


async def recover_children(
    runtime: Runtime,
    session_id: str,
    activities: Sequence[BackgroundActivity],
    offered: Mapping[str, Tool],
) -> None:
    """Run on the session's started, unended background children that nobody
    in this process runs (a `BackgroundService` recoverer). A child held by a
    live worker elsewhere is left to it; one never started is left to its
    queue; one this runtime cannot rebuild is left for a process that can."""
    live = LiveChildren.of(runtime)
    for activity in activities:
        if activity.kind != "subagent" or live.stop_signal(activity.id) is not None:
            continue
        entries = await runtime.store.load(activity.id)
        specs = [e.payload.spec for e in entries if isinstance(e.payload, SubagentDispatched)]
        started = any(isinstance(e.payload, SubagentStartedEntry) for e in entries)
        if not specs or not started:
            continue
        spec = ChildSpec.from_dict(specs[0])
        try:
            # A subagent's own definition, when the parent still offers it.
            status = await ChildWorker(runtime).run(spec, agent=_child_agent(offered, spec))
        except ConfigurationError as exc:
            logger.info(
                "background child %s of session %s is interrupted; this runtime cannot "
                "run it on (%s)",
                activity.id,
                session_id,
                exc,
            )
            continue
        if status is not None:
            logger.info(
                "background child %s of session %s was interrupted; ran it on to %s",
                activity.id,
                session_id,
                status.value,
            )


async def resume_children(runtime: Runtime, start: RunStart) -> None:
    """Take up, in a task, the session's background children that nobody runs
    on `runtime` (what a delegation tool does at a run's first boundary:
    `ResumesWork`)."""
    if "delegation" in start.claimed:
        return
    start.claimed.add("delegation")
    service = runtime.background
    for child in (a for a in await start.live() if a.kind == "subagent"):
        # A task each: running a child on takes as long as the child, and
        # one child's run must not hold up the others'.
        service.keep(
            _logged(
                functools.partial(
                    recover_children, runtime, start.session_id, [child], start.offered
                )
            )
        )


async def _logged(work: Callable[[], Awaitable[object]]) -> None:
    # Made here, not by the caller: a task cancelled before its first step
    # leaves no coroutine behind that was never awaited.
    try:
        await work()
    except Exception:
        logger.exception("going on with a background child failed")


async def resume_decided_child(
    runtime: Runtime, session_id: str, offered: Mapping[str, Tool]
) -> None:
    """Go on with a child whose escalated calls are all decided (a
    `BackgroundService` decision hook): on the runtime's queue if it has one
    (a worker resumes it), else here, now (`approve` returns once the child
    ended or parked again). Sessions that are not dispatched children are
    left alone."""
    if (await runtime.store.get(session_id)).parent_id is None:
        return  # a root session: its own resume is its owner's to start
    entries = await runtime.store.load(session_id)
    specs = [e.payload.spec for e in entries if isinstance(e.payload, SubagentDispatched)]
    if not specs:
        return
    spec = ChildSpec.from_dict(specs[0])
    # A work queue that carries children (taskloom.distributed's) hands it to a worker.
    dispatch = getattr(runtime.queue, "dispatch_child", None)
    if dispatch is not None:
        await dispatch(spec)
        return
    # Here, in a task: the decision is recorded whatever the child does next,
    # and whoever decided (a console request, an MCP update) is not held up.
    # The runner that parked it may still hold its lease for a moment.
    agent = _subagent_agent(runtime, spec, offered)
    BackgroundService.of(runtime).keep(
        _logged(functools.partial(ChildWorker(runtime).run, spec, agent=agent, wait=CHILD_LEASE))
    )


def _subagent_agent(runtime: Runtime, spec: ChildSpec, offered: Mapping[str, Tool]) -> Agent | None:
    """The agent of the `SubAgent` that started the child: from the deciding
    session's tools, or an agent of the runtime that offers it (None:
    rebuild it from the registries)."""
    for tools in (offered, *(a.tool_map for a in runtime.agents.values())):
        found = _child_agent(tools, spec)
        if found is not None:
            return found
    return None


def _child_agent(tools: Mapping[str, Tool], spec: ChildSpec) -> Agent | None:
    """The child agent of the delegation tool among `tools` that started the child, if any."""
    tool = tools.get(spec.type or "")
    return tool.child_agent if isinstance(tool, DelegationTool) else None


BackgroundService.decision_hooks.append(resume_decided_child)
