"""The `--app` factory of the Temporal engine's test workers (and the tests' host runtime).

    taskloom worker --temporal ADDRESS --app temporal_app:make_runtime

Configured by environment variables: `TLT_STORE` and `TLT_SCHEMA` (a
durable store's URL and schema, `-` for none), `TLT_ADDRESS`,
`TLT_NAMESPACE`, `TLT_TASK_QUEUE` (the Temporal server, namespace and
task queue), `TLT_HEARTBEAT` (the activities' heartbeat timeout),
`TLQ_LEASE_TTL`, `TLQ_WAKE`, `TLQ_EFFECTS` and `TLQ_TOOL_SLEEP` as in
`queue_app`, whose tools and models these agents use: `bot` touches once
per turn then answers with its pid; `lead` spawns one background child that
touches once, and answers once its report is in.
"""

from __future__ import annotations

import os

from queue_app import lead, touch, touch_then_answer

from taskloom import Agent, Runtime
from taskloom.backends import open_backend
from taskloom.delegation import Spawner
from taskloom.distributed import TemporalQueue
from taskloom.models import FunctionModel


def build(
    store: str,
    schema: str,
    *,
    address: str,
    namespace: str,
    task_queue: str,
    heartbeat: float = 2.0,
    lease_ttl: float = 3.0,
    wake: bool = False,
) -> Runtime:
    """The runtime a worker (or the test's host) uses."""
    queue = TemporalQueue(
        address, namespace=namespace, task_queue=task_queue, heartbeat_timeout=heartbeat
    )
    child = FunctionModel(touch_then_answer, name="child")
    spawner = Spawner(child, tools=[touch], dispatcher=queue.dispatcher(), max_children=8)
    options = {} if schema == "-" else {"schema": schema}
    return Runtime(
        store=open_backend(store, **options).store,
        queue=queue,
        agents=[
            Agent("bot", FunctionModel(touch_then_answer, name="bot"), tools=[touch]),
            Agent("lead", FunctionModel(lead, name="lead"), tools=[spawner.tool()]),
        ],
        tools=[touch],
        models=[child],
        lease_ttl=lease_ttl,
        wake_on_notice=wake,
    )


def make_runtime() -> Runtime:
    """The factory `taskloom worker --temporal ... --app temporal_app:make_runtime` calls."""
    env = os.environ
    return build(
        env["TLT_STORE"],
        env["TLT_SCHEMA"],
        address=env["TLT_ADDRESS"],
        namespace=env["TLT_NAMESPACE"],
        task_queue=env["TLT_TASK_QUEUE"],
        heartbeat=float(env.get("TLT_HEARTBEAT", "2")),
        lease_ttl=float(env.get("TLQ_LEASE_TTL", "3")),
        wake=env.get("TLQ_WAKE") == "1",
    )
