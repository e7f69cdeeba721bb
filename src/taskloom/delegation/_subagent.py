"""Named subagents: a specialist the parent hands a task to, with a clean context."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pydantic

from ..agent import Agent
from ..errors import ConfigurationError
from ..loop import DEFAULT_MAX_ROUNDS
from ..models import Model
from ..runtime import Runtime
from ..tools import ApprovalRule, Tool, ToolError, ToolLike, ToolOutput, as_tool
from ._children import (
    DEFAULT_MAX_ANSWER_CHARS,
    check_answer_cap,
    child_slot,
    create_child,
    linked_child,
    run_inline,
)
from ._handoff import ask_parent_tool, delegate_in_task, reply_to_child
from ._tool import DelegationTool

if TYPE_CHECKING:
    from ..tools import ToolContext

ON_APPROVAL = ("deny", "escalate")
"""What a child may do with an approval-gated call: deny it, or escalate it."""


def check_on_approval(owner: str, on_approval: str) -> str:
    """`on_approval`, checked."""
    if on_approval not in ON_APPROVAL:
        raise ConfigurationError(
            f"{owner}: on_approval={on_approval!r} must be 'deny' or 'escalate'"
        )
    return on_approval


def check_child_tools(
    owner: str, tools: Iterable[Tool], on_approval: str = "deny"
) -> tuple[Tool, ...]:
    """Tools a child may have: no delegation (one level deep), and approval
    gates only when the child escalates them (a child that denies has no one
    to ask: refused now rather than failing mid-run)."""
    checked = tuple(tools)
    for t in checked:
        if isinstance(t, DelegationTool):
            raise ConfigurationError(
                f"{owner}: tool {t.name!r} delegates; children cannot delegate further (one level deep)"
            )
        if t.is_gated and on_approval != "escalate":
            raise ConfigurationError(
                f"{owner}: tool {t.name!r} needs approval, which children cannot ask for; "
                "gate the delegation itself with needs_approval=, or escalate the child's "
                "approvals to the parent with on_approval='escalate'"
            )
    return checked


class _Delegation(pydantic.BaseModel, extra="forbid"):
    """A subagent tool's arguments."""

    task: str = pydantic.Field(description="The complete task: the agent sees nothing else.")
    name: str = pydantic.Field("", description="A short display name for this piece of work.")


class _Asking(_Delegation):
    """A subagent tool's arguments when its child may ask: a task, or an answer."""

    task: str = pydantic.Field("", description="The complete task: the agent sees nothing else.")
    child: str = pydantic.Field(
        "", description="Only to answer a question an agent asked: the child id it gave."
    )
    question: str = pydantic.Field(
        "", description="With child: the id of the question you answer, as it gave it."
    )
    reply: str = pydantic.Field("", description="Your answer to that question.")


class SubAgent:
    """A named specialist. `.tool()` gives the parent a tool named after it
    taking `task` (and an optional display `name`).

    Each call runs a fresh child session in the parent's store, linked from
    the parent's log; only the child's final answer returns, as
    `{"answer": ..., "tokens": ...}` (validated JSON with `output_type`),
    or an in-band error. `needs_approval` gates the delegation itself (a
    predicate gets the validated arguments, `""` where the model gave none).
    Other keyword options go to the child's `Agent`; `max_rounds` bounds its
    run (None lifts it). The child runs without the parent run's `deps`.

    With `background_after` (seconds), a longer call answers that the child
    still runs; its answer then reaches the parent as a notice, once, even if
    the process dies. With `ask_parent=True` the child may ask the parent (the
    call's result is the question; the parent answers with `child=` and
    `reply=`; unanswered for `ask_timeout` seconds means "no answer"). With
    `on_approval="escalate"` a gated call parks the child and the parent (it
    shows among the parent's `pending()`), and the parent's `resume()` takes
    the child up once decided. An answer or question longer than
    `max_answer_chars` reaches the parent cut there, saying how to read on.
    """

    def __init__(
        self,
        name: str,
        description: str,
        model: Model | str,
        instructions: str | None = None,
        tools: Iterable[ToolLike] = (),
        output_type: type[Any] | Mapping[str, Any] | None = None,
        needs_approval: ApprovalRule = False,
        *,
        max_rounds: int | None = DEFAULT_MAX_ROUNDS,
        background_after: float | None = None,
        ask_parent: bool = False,
        ask_timeout: float = 600.0,
        on_approval: str = "deny",
        max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
        **agent_options: Any,
    ) -> None:
        if background_after is not None and (
            not isinstance(background_after, int | float)
            or isinstance(background_after, bool)
            or not background_after > 0
        ):
            raise ConfigurationError(
                f"subagent {name!r}: background_after={background_after!r} must be a number "
                "of seconds above 0, or None"
            )
        if not description:
            raise ConfigurationError(
                f"subagent {name!r} needs a description: the parent model reads it"
            )
        self.on_approval = check_on_approval(f"subagent {name!r}", on_approval)
        tool_list = check_child_tools(
            f"subagent {name!r}", (as_tool(t) for t in tools), on_approval
        )
        self.max_answer_chars = check_answer_cap(f"subagent {name!r}", max_answer_chars)
        if ask_parent:
            tool_list = (*tool_list, ask_parent_tool(ask_timeout, max_answer_chars))
        self.name = name
        self.description = description
        self.needs_approval = needs_approval
        self.max_rounds = max_rounds
        self.background_after = background_after
        self.ask_parent = ask_parent
        self.agent = Agent(
            name, model, instructions, tool_list, output_type=output_type, **agent_options
        )

    def __repr__(self) -> str:
        return f"SubAgent({self.name!r})"

    @property
    def escalates(self) -> bool:
        """Whether the child escalates its approval-gated calls to the parent."""
        return self.on_approval == "escalate"

    def tool(self) -> Tool:
        """A delegation tool for a parent agent (a new one each call)."""
        # Not kept here: its copies bound to runtimes call back into this
        # SubAgent, so keeping it would keep them alive as long as the
        # runtimes (see `BindsRuntime`).
        return DelegationTool(
            self.name,
            self.description,
            _Asking if self.ask_parent else _Delegation,
            self._delegate,
            needs_approval=self.needs_approval,
            child_agent=self.agent,
        )

    async def _delegate(
        self, runtime: Runtime, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolOutput:
        child = arguments.get("child")
        if child:
            reply = arguments["reply"]
            if not reply:
                raise ToolError(f"{self.name}: give 'reply' (your answer) with 'child'")
            return await reply_to_child(
                self, runtime, ctx, child, reply, arguments["question"] or None
            )
        task = arguments["task"].strip()
        if not task:
            raise ToolError(
                f"{self.name}: 'task' is empty; describe the complete task for the agent"
            )
        display = arguments["name"] or self.name
        if self.escalates:
            # Run again by its parent's resume of a turn parked on its child.
            earlier = await linked_child(runtime, ctx)
            if earlier is not None:
                return await delegate_in_task(self, runtime, ctx, task, display, child_id=earlier)
        if self.background_after is not None or self.ask_parent or self.escalates:
            return await delegate_in_task(self, runtime, ctx, task, display)
        async with child_slot(runtime, ctx):
            child = await create_child(
                runtime, ctx, self.agent, name=display, task=task, mode="inline", role=self.name
            )
            outcome = await run_inline(
                runtime, ctx, child, task, name=display, role=self.name, max_rounds=self.max_rounds
            )
        return outcome.to_tool_output(self.max_answer_chars)
