"""The `--app` factory of the recovery tests: the `crashy` agent of
crash_child.py, whose model answers "recovered" to whatever it is asked.

    taskloom resume ID --app recover_app:make_runtime

`RECOVER_URL` and `RECOVER_SCHEMA` name the store (a `store_url` pair),
`RECOVER_EFFECTS` the file each charge is marked in.
"""

from __future__ import annotations

import os

from pg import open_durable
from taskloom import Agent, Runtime, ToolContext, tool
from taskloom.models import FunctionModel, reply


@tool
async def charge(amount: int, ctx: ToolContext) -> str:
    """Charge a card (marked in the effects file: it must never run twice)."""
    with open(os.environ["RECOVER_EFFECTS"], "a") as f:  # noqa: ASYNC230 (a test's mark)
        f.write(f"{ctx.call_id}\n")
    return f"charged {amount}"


def make_runtime() -> Runtime:
    """The runtime `taskloom resume` goes on with the session in."""
    model = FunctionModel(lambda request: reply("recovered"), name="crash")
    store = open_durable(os.environ["RECOVER_URL"], os.environ["RECOVER_SCHEMA"])
    return Runtime(store=store, agents=[Agent("crashy", model, tools=[charge])])
