"""Structured output: the final answer as a validated value, natively (the
request's `output_schema`) where the model has it, else through the
`final_result` tool; an invalid answer is corrected in band at most `fixes`
times (docs/howto/structured-output.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..messages import arguments_problem
from ..models import Model
from ..results import RunStatus, ToolSpec
from ..tools import ArgumentsInvalid, Tool, ToolContext, ToolEffect
from ._result import EndRun

if TYPE_CHECKING:
    from .._output_type import OutputType
    from ._port import AgentSpec

OUTPUT_TOOL = "final_result"
"""The name of the final-answer tool offered to models without native structured output."""

_WRAPPED = "response"


def output_tool_schema(schema: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The final-answer tool's input schema for an output schema, and whether
    the answer was wrapped (tool arguments are always a JSON object)."""
    if schema.get("type") == "object":
        return dict(schema), False
    inner = dict(schema)
    # Definitions stay at the root, where the inner schema's `$ref`s point.
    defs: dict[str, Any] = {k: inner.pop(k) for k in ("$defs", "definitions") if k in inner}
    wrapped: dict[str, Any] = {
        "type": "object",
        "properties": {_WRAPPED: inner},
        "required": [_WRAPPED],
        "additionalProperties": False,
        **defs,
    }
    return wrapped, True


class OutputTool(Tool):
    """The final-answer tool of one run: validates its arguments as the agent's
    output and keeps what the current turn gave (`take`)."""

    __slots__ = ("_accepted", "_output", "_problem", "_value", "_wrapped")

    def __init__(self, output: OutputType) -> None:
        input_schema, wrapped = output_tool_schema(output.json_schema)
        super().__init__(
            OUTPUT_TOOL,
            "Give your final answer with this tool, once you have it: its arguments are the"
            " answer, following the schema. Call it alone, as your last step.",
            input_schema,
            effect=ToolEffect.READ_ONLY,
        )
        self._output = output
        self._wrapped = wrapped
        self._accepted = False
        self._value: object = None
        self._problem: str | None = None

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments validated as the agent's output (`ArgumentsInvalid` says why not)."""
        problem = arguments_problem(arguments)
        if problem is None:
            value: object = arguments
            if self._wrapped:
                if set(arguments) != {_WRAPPED}:
                    problem = f"give the answer as the one argument {_WRAPPED!r}"
                value = arguments.get(_WRAPPED)
            if problem is None:
                try:
                    return {"output": self._output.validate(value)}
                except ValueError as exc:
                    problem = str(exc)
        self._problem = problem
        raise ArgumentsInvalid(problem)

    async def invoke(self, arguments: dict[str, Any], ctx: ToolContext[Any]) -> Any:
        self._accepted = True
        self._value = arguments["output"]
        return "Final answer received."

    def take(self) -> tuple[bool, object, str | None]:
        """What this turn's calls gave: (accepted, the value, the last problem);
        forgets it, ready for the next turn."""
        outcome = (self._accepted, self._value, self._problem)
        self._accepted, self._value, self._problem = False, None, None
        return outcome


class FinalOutput:
    """The final answer of one run: which way it is asked for, what was
    accepted, and the corrective turns used (`fixes`)."""

    __slots__ = (
        "_agent",
        "_by_tool",
        "_output",
        "_schema",
        "_tool",
        "accepted",
        "fixes_used",
        "text",
        "value",
    )

    def __init__(self, agent: AgentSpec) -> None:
        self._agent = agent
        self._output = output = agent.output
        self._schema = None if output is None else output.json_schema
        self._tool = None if output is None else OutputTool(output)
        self.fixes_used = 0
        self.accepted = False
        self.value: object = None
        # The answer as JSON text, when it came through the tool.
        self.text: str | None = None
        self._by_tool = False

    @property
    def is_structured(self) -> bool:
        """Whether the agent has an output type (else the answer is its text)."""
        return self._schema is not None

    def tools(self, tools: Mapping[str, Tool]) -> Mapping[str, Tool]:
        """The run's tools: the agent's, plus the final-answer tool when there is
        an output type (a call of it is answered whichever way was asked)."""
        if self._tool is None:
            return tools
        return {**tools, OUTPUT_TOOL: self._tool}

    def ask(self, model: Model) -> tuple[Mapping[str, Any] | None, tuple[ToolSpec, ...]]:
        """How a request to `model` asks for the answer: the native output schema,
        or the final-answer tool's spec to offer with the agent's tools."""
        self._by_tool = False
        if self._tool is None:
            return None, ()
        # A model without `ModelRequest.output_schema` says so with a false `native_output`.
        if getattr(model, "native_output", True):
            return self._schema, ()
        self._by_tool = True
        return None, (self._tool.spec,)

    def after_tools(self) -> bool:
        """Whether this turn's tool calls gave an accepted final answer; a
        rejected one uses a fix (the error result was the correction), and
        past the last fix ends the run FAILED."""
        if self._tool is None:
            return False
        accepted, value, problem = self._tool.take()
        if accepted:
            self._accept(value, json.dumps(to_jsonable(value), ensure_ascii=False))
            return True
        if problem is not None:
            self._use_fix(problem)
        return False

    def check_text(self, text: str) -> str | None:
        """Accept a final text answer, or return the corrective user turn to
        send; past the last fix, end the run FAILED."""
        if self._output is None:
            self._accept(text, None)
            return None
        try:
            value = self._output.parse(text)
        except ValueError as exc:
            if self.accepted:
                # The answer came through the tool; this text only followed
                # the notices that kept the run going.
                return None
            self._use_fix(str(exc))
            how = (
                f"Call the {OUTPUT_TOOL} tool with the answer."
                if self._by_tool
                else "Reply again with only a JSON value that follows the schema."
            )
            return f"Your answer did not match the required output schema: {exc}\n{how}"
        self._accept(value, None)
        return None

    def _accept(self, value: object, text: str | None) -> None:
        self.accepted = True
        self.value = value
        self.text = text

    def _use_fix(self, problem: str) -> None:
        if self.fixes_used >= self._agent.fixes:
            raise EndRun(
                RunStatus.FAILED,
                f"the answer did not match the output schema after {self.fixes_used} "
                f"correction(s): {problem}",
            )
        self.fixes_used += 1


def to_jsonable(value: object) -> Any:
    """`value` as JSON data (pydantic models, dataclasses, ... included); its
    `str` when it has no JSON form."""
    import pydantic_core

    try:
        return pydantic_core.to_jsonable_python(value)
    except (TypeError, ValueError, pydantic_core.PydanticSerializationError):
        return str(value)
