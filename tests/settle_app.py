"""The `--app` factory of the settle test (test_cli_settle.py): spawned_child.py's
lead, whose background child ("deep") answers "forty-two" only once the
file `SETTLE_GO` names exists (the test makes it once the command said it
waits for the child).

    taskloom run "Go on." --session ROOT --app settle_app:make_runtime

`SETTLE_URL` and `SETTLE_SCHEMA` name the store.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import spawned_child
from taskloom import Runtime
from taskloom.backends import open_backend
from taskloom.models import FunctionModel, ModelRequest, reply


async def when_told(request: ModelRequest) -> Any:
    go = Path(os.environ["SETTLE_GO"])
    while not go.exists():  # noqa: ASYNC240 (a test's barrier file, polled)
        await asyncio.sleep(0.02)
    return reply("forty-two")


def make_runtime() -> Runtime:
    """The runtime of the command that goes on with the root."""
    schema = os.environ["SETTLE_SCHEMA"]
    options: dict[str, Any] = {"schema": schema} if schema != "-" else {}
    deep = FunctionModel(when_told, name="deep")
    return Runtime(
        store=open_backend(os.environ["SETTLE_URL"], **options).store,
        agents=[spawned_child.build(deep)],
        models=[deep],
    )
