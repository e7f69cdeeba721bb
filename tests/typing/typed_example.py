"""What a type checker infers from `Agent(...)` (checked by tests/test_typing.py).

Each `reveal_type` line says what mypy must reveal in a comment after it.
"""

from __future__ import annotations

import dataclasses
from typing import reveal_type

import pydantic

from taskloom import Agent, Runtime, ToolContext, tool
from taskloom.models import ScriptedModel


class Invoice(pydantic.BaseModel):
    number: str
    total: float


@dataclasses.dataclass
class Deps:
    user: str


@tool
def whoami(ctx: ToolContext[Deps]) -> str:
    reveal_type(ctx.deps)  # expect: typed_example.Deps
    return ctx.deps.user


@tool
def untyped(ctx: ToolContext) -> str:
    reveal_type(ctx.deps)  # expect: Any
    return ""


model = ScriptedModel([])
plain = Agent("plain", model)
reveal_type(plain)  # expect: taskloom.agent.Agent[None, str]
invoices = Agent("invoices", model, output_type=Invoice)
reveal_type(invoices)  # expect: taskloom.agent.Agent[None, typed_example.Invoice]
older = Agent("older", model, output_type=Invoice)
reveal_type(older)  # expect: taskloom.agent.Agent[None, typed_example.Invoice]
schema = Agent("schema", model, output_type={"type": "object"})
reveal_type(schema)  # expect: taskloom.agent.Agent[None, Any]
with_deps = Agent("deps", model, tools=[whoami], deps_type=Deps, output_type=list[int])
reveal_type(with_deps)  # expect: taskloom.agent.Agent[typed_example.Deps, list[int]]


async def main() -> None:
    result = await invoices.run("bill me")
    reveal_type(result)  # expect: taskloom.results.RunResult[typed_example.Invoice]
    reveal_type(result.output)  # expect: typed_example.Invoice | None
    reveal_type((await plain.run("hi")).output)  # expect: str | None
    numbers = with_deps.run_sync("x", deps=Deps("ada"))
    reveal_type(numbers)  # expect: taskloom.results.RunResult[list[int]]
    session = await Runtime().create_session(invoices)
    reveal_type(session)  # expect: taskloom.runtime._session.Session[None, typed_example.Invoice]
    again = await session.run("again")
    reveal_type(again)  # expect: taskloom.results.RunResult[typed_example.Invoice]
    stream = session.stream("streamed")
    reveal_type(await stream)  # expect: taskloom.results.RunResult[typed_example.Invoice]
    deps_session = await Runtime().create_session(with_deps)
    await deps_session.run("x", deps=Deps("bo"))
    await deps_session.run("x", deps="not deps")  # expect-error: arg-type
    reveal_type(Agent("y", model).replace(name="z"))  # expect: taskloom.agent.Agent[Any, Any]
