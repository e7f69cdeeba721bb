"""A subagent call that outlasts `background_after` goes on in the background.

The child runs in a task the background service owns, under its own lease,
registered under the parent like any background child, with its `ChildSpec`
in its log. If it ends within `background_after` seconds, the call answers
as an inline delegation does. Otherwise the call answers at once that the
child is still running; its report reaches the parent's inbox when it ends
(once: the notice id is the child's), delivered at a later round. If the
process dies meanwhile, the parent's next run takes the child up again from
its log (`recover_children`).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..background import BackgroundActivity, BackgroundService
from ..events import Event, origin_label
from ..loop import RunOptions
from ..tools import ToolContext, ToolOutput
from ._children import (
    CHILD_LEASE,
    ChildOutcome,
    LiveChildren,
    child_slot,
    child_started,
    create_child,
    execute_child,
    host_runtime,
    report_inline,
    summary,
)
from ._dispatch import ChildSpec, ChildWorker

if TYPE_CHECKING:
    from ._subagent import SubAgent

__all__ = ["delegate_with_handoff"]

_REGISTRATION = CHILD_LEASE * 10
"""Seconds a handed-off child's registration lives without renewal, as a background child's."""


def _spec(sub: SubAgent, ctx: ToolContext, child_id: str, name: str, task: str) -> ChildSpec:
    agent = sub.agent
    model = agent.model
    tree = ctx.controls.tree
    return ChildSpec(
        child_session_id=child_id,
        parent_session_id=ctx.session_id,
        name=name,
        task=task,
        instructions=agent.instructions,
        tools=tuple(t.name for t in agent.tools),
        model=model if isinstance(model, str) or model is None else model.spec,
        type=sub.name,
        max_rounds=sub.max_rounds,
        parent_run_id=ctx.run_id,
        budget=tree.to_dict() if tree is not None else None,
    )


async def delegate_with_handoff(
    sub: SubAgent, ctx: ToolContext, task: str, name: str, after: float
) -> ToolOutput:
    """Run the subagent's child; hand it to the background after `after` seconds."""
    runtime = host_runtime(ctx)
    background = BackgroundService.of(runtime)
    child_id = uuid.uuid4().hex
    spec = _spec(sub, ctx, child_id, name, task)
    activity = BackgroundActivity(
        child_id,
        "subagent",
        f"{name}: {summary(task, 80)}",
        time.time(),
        ctx.run_id,
        {"name": name, "mode": "inline"},
    )
    await background.registry.add(ctx.session_id, activity, _REGISTRATION)
    try:
        child = await create_child(
            ctx,
            sub.agent,
            name=name,
            task=task,
            mode="inline",
            role=sub.name,
            spec=spec.to_dict(),
            session_id=child_id,
        )
    except BaseException:
        await background.lifecycle.discard(ctx.session_id, child_id)
        raise
    options = RunOptions.for_child(ctx.controls, max_rounds=sub.max_rounds)
    handed_off = False
    # Events go to the parent's subscribers until the hand-off, then to the
    # runtime's (the parent's run may be over by the time the child ends).
    relay: list[Callable[[Event], None] | None] = [ctx.emit]

    def emit(event: Event) -> None:
        target = relay[0]
        if target is not None:
            target(event)

    async def keep_registered() -> None:
        await background.lifecycle.alive(ctx.session_id, child_id, lease=_REGISTRATION)

    async def run() -> ChildOutcome:
        async with child_slot(ctx):
            with LiveChildren.of(runtime).running(child_id, options.stop):
                async with child.hold() as held:
                    held.on_lost(lambda: options.stop.set("the child was taken over"))
                    held.on_renewed(keep_registered)
                    outcome = await execute_child(
                        child,
                        task,
                        name=name,
                        options=options,
                        emit=emit,
                        origin=origin_label(name, child_id, ctx.origin),
                    )
        # No await between this check and the return: the hand-off happens
        # either before it (reported here) or after the task ended (not).
        if handed_off:
            await ChildWorker(runtime).report(spec, outcome)
        return outcome

    child_started(ctx, child_id, name, task)
    running = background.keep(run())
    try:
        done, _ = await asyncio.wait({running}, timeout=after)
    except asyncio.CancelledError:
        # The parent's call was cancelled before the hand-off: so is its child.
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await background.lifecycle.discard(ctx.session_id, child_id)
        raise
    if done:
        await background.lifecycle.discard(ctx.session_id, child_id)
        outcome = running.result()
        await report_inline(ctx, outcome, role=sub.name, task=task)
        return outcome.to_tool_output()
    handed_off = True
    relay[0] = background.emit
    notices = background.notices_for(ctx.run_id)
    if notices is not None:
        notices.mark_started(child_id)
    receipt: dict[str, Any] = {
        "id": child_id,
        "name": name,
        "status": "running",
        "note": (
            f"Still running after {after:g} s, so it goes on in the background; "
            "its answer arrives as a notice at a later round."
        ),
    }
    return ToolOutput(json.dumps(receipt))
