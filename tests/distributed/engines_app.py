"""The `--app` factory of the engine-neutral queue tests: one runtime, on either engine.

    taskloom worker --app engines_app:make_runtime                      # procrastinate
    taskloom worker --temporal ADDRESS --app engines_app:make_runtime   # Temporal

The same agents, tools and models on both engines, so a test says what it
expects once. Configured by environment variables: `TLE_ENGINE`
(`procrastinate` or `temporal`), `TLE_STORE` and `TLE_SCHEMA` (the durable
store's URL and schema, `-` for none), `TLE_ADDRESS`, `TLE_NAMESPACE` and
`TLE_TASK_QUEUE` (Temporal's server, namespace and task queue),
`TLQ_LEASE_TTL`, `TLQ_WAKE`, `TLQ_AGENTS`, `TLQ_EFFECTS`, `TLQ_TOOL_SLEEP`,
`TLQ_TOOL_GATE` and `TLQ_FANOUT` as in `queue_app`, whose tools and models
these agents use: `bot` touches once per turn then answers with its pid;
`lead` spawns one background child that touches once, and answers once its
report is in; `direct` pays 70 (a call a person approves), then says so;
`boss` fans out `TLQ_FANOUT` background children that spend tokens (the
tree budget's test).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from queue_app import boss, lead, pay, payer, spend, touch, touch_then_answer

from taskloom import Agent, Runtime
from taskloom.backends import open_backend
from taskloom.delegation import Spawner
from taskloom.distributed import TemporalQueue, WorkQueue
from taskloom.models import FunctionModel

ENGINES = ("procrastinate", "temporal")
"""The engines this app builds a queue for (`TLE_ENGINE`)."""


def queue_of(env: Mapping[str, str]) -> WorkQueue | TemporalQueue:
    """The engine's queue, with the short timeouts of tests (a dead worker is
    noticed within about two seconds on both)."""
    engine = env["TLE_ENGINE"]
    if engine == "procrastinate":
        schema = env["TLE_SCHEMA"]
        return WorkQueue(
            env["TLE_STORE"],
            schema=None if schema == "-" else schema,
            heartbeat=0.5,
            stall_timeout=2.0,
            reap_every=0.5,
            poll_every=0.2,
        )
    if engine == "temporal":
        return TemporalQueue(
            env["TLE_ADDRESS"],
            namespace=env["TLE_NAMESPACE"],
            task_queue=env["TLE_TASK_QUEUE"],
            heartbeat_timeout=2.0,
        )
    raise ValueError(f"TLE_ENGINE must be one of {ENGINES}, not {engine!r}")


def build(env: Mapping[str, str], *, wake: bool | None = None) -> Runtime:
    """The runtime a worker (or the test's host) uses; `wake` overrides `TLQ_WAKE`."""
    queue = queue_of(env)
    child = FunctionModel(touch_then_answer, name="child")
    spender = FunctionModel(spend, name="spender")
    spawner = Spawner(child, tools=[touch], dispatcher=queue.dispatcher(), max_children=8)
    fanout = Spawner(spender, dispatcher=queue.dispatcher(), max_children=64)
    everyone = [
        Agent("bot", FunctionModel(touch_then_answer, name="bot"), tools=[touch]),
        Agent("lead", FunctionModel(lead, name="lead"), tools=[spawner.tool()]),
        Agent("direct", FunctionModel(payer, name="direct"), tools=[pay]),
        Agent("boss", FunctionModel(boss, name="boss"), tools=[fanout.tool()]),
    ]
    agents = env.get("TLQ_AGENTS")
    wanted = None if agents is None else set(filter(None, agents.split(",")))
    schema = env["TLE_SCHEMA"]
    options = {} if schema == "-" else {"schema": schema, "max_size": 4}
    return Runtime(
        store=open_backend(env["TLE_STORE"], **options).store,
        queue=queue,
        agents=[a for a in everyone if wanted is None or a.name in wanted],
        tools=[touch, pay],
        models=[child, spender],
        lease_ttl=float(env.get("TLQ_LEASE_TTL", "3")),
        wake_on_notice=env.get("TLQ_WAKE") == "1" if wake is None else wake,
    )


def make_runtime() -> Runtime:
    """The factory `taskloom worker [--temporal ...] --app engines_app:make_runtime` calls."""
    return build(os.environ)
