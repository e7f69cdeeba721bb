"""The Temporal engine's schedule firing workflow (sandbox-safe: ids and small dicts).

A `TemporalQueue.schedule` is a Temporal schedule whose action starts this
workflow, with the id `taskloom-firing-<schedule>` to which Temporal
appends the firing's scheduled time (`...-2026-12-07T06:00:00Z`): one id per
firing, which the `taskloom.fire_schedule` activity uses as the key of the
steering it writes, so a retried attempt does not write it again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

from ._temporal_names import FIRE_ACTIVITY, FIRING_WORKFLOW

FIRING_ATTEMPTS = 10
"""Attempts of one firing (0.5 s doubling up to 10 s apart, about a minute):
a firing that cannot reach the store or the server that long is given up,
and the next one comes on time."""


@workflow.defn(name=FIRING_WORKFLOW)
class FiringWorkflow:
    """One firing: the activity writes the input and wakes the session."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> str:
        """Fire; what the activity did."""
        beat = float(args.get("heartbeat_timeout") or 10.0)
        result: str = await workflow.execute_activity(
            FIRE_ACTIVITY,
            {**args, "firing": workflow.info().workflow_id},
            start_to_close_timeout=timedelta(seconds=max(60.0, 6 * beat)),
            heartbeat_timeout=timedelta(seconds=beat),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=0.5),
                maximum_interval=timedelta(seconds=10),
                maximum_attempts=FIRING_ATTEMPTS,
                non_retryable_error_types=["SessionNotFound", "Malformed"],
            ),
        )
        return result
