"""The `taskloom` logger: background failures and redeliveries, with the session id.

(Retries are in tests/test_tracing.py, lease takeovers in tests/test_leases.py.)
The package adds no handler of its own: the host's logging config decides.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

import taskloom
from taskloom import Agent, Runtime
from taskloom.delegation import ChildSpec, ChildStatus, ChildWorker
from taskloom.models import ScriptedModel
from tracing_agents import note, scribe


def test_the_package_adds_no_handler() -> None:
    assert taskloom is not None
    assert logging.getLogger("taskloom").handlers == []


async def test_failed_background_work_is_logged_with_its_session(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = Runtime()
    noticed = asyncio.Event()
    runtime.watch("s-1", noticed.set)

    async def work() -> str:
        raise RuntimeError("the disk is full")

    with caplog.at_level(logging.WARNING, logger="taskloom"):
        aid = await runtime.background.spawn("s-1", "job", "a job", work)
        await asyncio.wait_for(noticed.wait(), 5)
    (record,) = [r for r in caplog.records if r.name == "taskloom"]
    assert record.levelno == logging.WARNING
    assert "s-1" in record.getMessage() and aid in record.getMessage()
    assert record.exc_info is not None and "the disk is full" in str(record.exc_info[1])
    await runtime.close()


async def test_a_background_child_delivered_again_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = scribe()
    runtime = Runtime(tools={"note": note}, models={model.spec: model})
    parent = await runtime.create_session(Agent("lead", ScriptedModel([])))
    child = await runtime.create_session(Agent("bg", model), parent_id=parent.id)
    spec = ChildSpec(child.id, parent.id, "bg", "note it", tools=("note",), model=model.spec)
    worker = ChildWorker(runtime)
    with caplog.at_level(logging.INFO, logger="taskloom"):
        assert await worker.run(spec) is ChildStatus.DONE
        assert not [r for r in caplog.records if r.name == "taskloom"]
        assert await worker.run(spec) is ChildStatus.DONE
    (record,) = [r for r in caplog.records if r.name == "taskloom"]
    assert "delivered again" in record.getMessage()
    assert child.id in record.getMessage() and parent.id in record.getMessage()
    await runtime.close()
