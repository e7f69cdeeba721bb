"""Agents and tools both processes of tests/test_tracing_processes.py rebuild alike."""

from __future__ import annotations

from typing import Any

from taskloom import Agent, tool
from taskloom.models import FunctionModel, ModelRequest, ScriptedModel, reply


@tool(needs_approval=True)
def deploy(target: str) -> str:
    """Deploy to a target (a human approves it first)."""
    return f"deployed to {target}"


def deployer(resuming: bool = False) -> Agent:
    """Asks to deploy (and parks for approval); resuming, says it is done."""
    script = (
        [reply("Deployed.")] if resuming else [reply(tool_calls=[("deploy", {"target": "prod"})])]
    )
    return Agent("deployer", ScriptedModel(script, name="ops"), "You deploy.", [deploy])


@tool
def note(text: str) -> str:
    """Write a note."""
    return "noted"


async def _scribe(request: ModelRequest) -> Any:
    if len(request.messages) == 1:
        return reply(tool_calls=[("note", {"text": request.messages[0].text})])
    return reply("noted it")


def scribe() -> FunctionModel:
    """A background worker's model: writes one note, then answers."""
    return FunctionModel(_scribe, name="scribe")
