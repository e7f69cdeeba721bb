"""Typed structured output: `Agent(output_type=...)`, natively or through a final-answer tool."""

from __future__ import annotations

import dataclasses
import json
import sys
import typing
from typing import Any

import pydantic
import pytest
from typing_extensions import TypedDict

from taskloom import Agent, ConfigurationError, RunStatus, Runtime, tool
from taskloom.entries import RunFinishedEntry
from taskloom.models import AnthropicModel, OpenAIChatModel, ScriptedModel, reply
from taskloom.testing.fake_server import FakeServer


class Invoice(pydantic.BaseModel):
    number: str
    total: float


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Person(TypedDict):
    name: str
    age: int


INVOICE = {"number": "A-1", "total": 12.5}


def tool_names(request: Any) -> list[str]:
    return [t.name for t in request.tools]


# ---------------------------------------------------------------- native


@pytest.mark.parametrize(
    ("output_type", "answer", "expected"),
    [
        (Invoice, INVOICE, Invoice(number="A-1", total=12.5)),
        (Point, {"x": 1, "y": "2"}, Point(1, 2)),
        (Person, {"name": "Ada", "age": 36}, {"name": "Ada", "age": 36}),
        (list[int], [1, "2"], [1, 2]),
        (
            {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            {"n": 3},
            {"n": 3},
        ),
    ],
    ids=["pydantic", "dataclass", "typeddict", "list", "json-schema"],
)
async def test_native_output_is_validated_into_the_output_type(
    output_type: Any, answer: Any, expected: Any
) -> None:
    model = ScriptedModel([json.dumps(answer)])
    result = await Agent(model=model, output_type=output_type).run("go")

    assert result.status is RunStatus.COMPLETED
    assert result.output == expected
    request = model.requests[0]
    assert request.output_schema is not None
    assert "final_result" not in tool_names(request)


async def test_an_agent_without_output_type_has_its_text_as_output() -> None:
    result = await Agent(model=ScriptedModel(["plain words"])).run("go")
    assert result.output == "plain words" == result.text


async def test_no_output_unless_the_run_completed() -> None:
    model = ScriptedModel([reply(tool_calls=[("slow", {})])])

    @tool(needs_approval=True)
    def slow() -> str:
        """Slow."""
        return ""

    result = await Agent(model=model, tools=[slow], output_type=Invoice).run("go")
    assert result.status is RunStatus.AWAITING_APPROVAL and result.output is None


async def test_an_invalid_native_answer_is_corrected_then_fails_clearly() -> None:
    model = ScriptedModel(['{"number": "A-1"}', "not json", '{"total": "x"}'])
    result = await Agent(model=model, output_type=Invoice, fixes=2).run("go")

    assert result.status is RunStatus.FAILED
    assert result.output is None
    assert result.error is not None
    assert result.error.startswith("the answer did not match the output schema after 2")
    assert "number: Field required" in result.error
    fix = model.requests[1].messages[-1]
    assert fix.role == "user" and "total: Field required" in fix.text
    assert "only a JSON value" in fix.text


# ---------------------------------------------------------------- the tool fallback


async def test_a_model_without_native_output_answers_through_the_final_result_tool() -> None:
    model = ScriptedModel(
        [reply("here it is", tool_calls=[("final_result", INVOICE)])], native_output=False
    )
    runtime = Runtime()
    session = await runtime.create_session(Agent(model=model, output_type=Invoice))
    result = await session.run("go")

    assert result.status is RunStatus.COMPLETED
    assert result.output == Invoice(number="A-1", total=12.5)
    assert json.loads(result.text) == INVOICE
    request = model.requests[0]
    assert request.output_schema is None
    (spec,) = request.tools
    assert spec.name == "final_result" and spec.input_schema["required"] == ["number", "total"]
    # The call got its one result: the transcript replays to any provider.
    last = (await session.transcript())[-1]
    assert last.role == "tool" and not last.results[0].is_error
    finished = [e.payload for e in await session.entries() if e.kind == "run_finished"]
    assert isinstance(finished[-1], RunFinishedEntry) and finished[-1].output == INVOICE


async def test_the_tool_fallback_runs_with_the_agents_tools() -> None:
    @tool
    def lookup(number: str) -> float:
        """Lookup."""
        return 12.5

    model = ScriptedModel(
        [
            reply(tool_calls=[("lookup", {"number": "A-1"})]),
            reply(tool_calls=[("final_result", INVOICE)]),
        ],
        native_output=False,
    )
    result = await Agent(model=model, tools=[lookup], output_type=Invoice).run("go")
    assert result.output == Invoice(number="A-1", total=12.5)
    assert tool_names(model.requests[0]) == ["lookup", "final_result"]


async def test_invalid_tool_arguments_are_corrected_in_band_then_fail_clearly() -> None:
    bad = reply(tool_calls=[("final_result", {"number": "A-1", "total": "lots"})])
    model = ScriptedModel([bad, bad], native_output=False)
    result = await Agent(model=model, output_type=Invoice, fixes=1).run("go")

    correction = model.requests[1].messages[-1].results[0]
    assert correction.is_error
    assert "total: Input should be a valid number" in correction.content
    assert result.status is RunStatus.FAILED
    assert result.error is not None and "after 1 correction(s): total" in result.error


async def test_a_valid_text_answer_is_accepted_in_tool_mode_and_an_invalid_one_told_the_tool() -> (
    None
):
    model = ScriptedModel(["I think it is A-1", json.dumps(INVOICE)], native_output=False)
    result = await Agent(model=model, output_type=Invoice).run("go")
    assert result.output == Invoice(number="A-1", total=12.5)
    assert "Call the final_result tool" in model.requests[1].messages[-1].text


async def test_a_non_object_output_is_wrapped_for_the_tool() -> None:
    model = ScriptedModel(
        [reply(tool_calls=[("final_result", {"response": [3, 1]})])], native_output=False
    )
    result = await Agent(model=model, output_type=list[int]).run("go")
    assert result.output == [3, 1]
    schema = model.requests[0].tools[0].input_schema
    assert schema["required"] == ["response"]
    assert schema["properties"]["response"]["type"] == "array"


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="pydantic takes typing.TypedDict on 3.12+")
def test_a_typing_typeddict_is_refused_at_construction_before_python_3_12() -> None:
    class Old(typing.TypedDict):
        name: str

    with pytest.raises(ConfigurationError, match=r"typing_extensions\.TypedDict"):
        Agent(model=ScriptedModel([]), output_type=Old)


def test_final_result_is_a_reserved_tool_name_with_an_output_type() -> None:
    @tool
    def final_result() -> str:
        """Final result."""
        return ""

    Agent(model=ScriptedModel([]), tools=[final_result])  # fine without an output type
    with pytest.raises(ConfigurationError, match="reserved"):
        Agent(model=ScriptedModel([]), tools=[final_result], output_type=Invoice)


# ---------------------------------------------------------------- providers


async def test_older_claude_models_get_the_tool_and_newer_ones_native_output() -> None:
    answer = FakeServer.reply(tool_calls=[("final_result", INVOICE)])
    async with FakeServer() as server:
        server.script(answer, FakeServer.reply(json.dumps(INVOICE)))
        old = AnthropicModel("claude-3-5-sonnet-latest", base_url=server.anthropic_base_url)
        new = AnthropicModel("claude-sonnet-4-5", base_url=server.anthropic_base_url)
        assert not old.native_output and new.native_output
        for model in (old, new):
            result = await Agent(model=model, output_type=Invoice).run("go")
            assert result.output == Invoice(number="A-1", total=12.5)
    old_body, new_body = (r.body for r in server.requests)
    assert [t["name"] for t in old_body["tools"]] == ["final_result"]
    assert "output_config" not in old_body
    assert "tools" not in new_body
    assert new_body["output_config"]["format"]["type"] == "json_schema"


async def test_an_openai_compatible_server_can_say_it_has_no_native_output() -> None:
    async with FakeServer() as server:
        server.script(FakeServer.reply(tool_calls=[("final_result", INVOICE)]))
        model = OpenAIChatModel("local", base_url=server.base_url, api_key="k", native_output=False)
        result = await Agent(model=model, output_type=Invoice).run("go")
    assert result.output == Invoice(number="A-1", total=12.5)
    (request,) = server.requests
    assert "response_format" not in request.body
    assert request.body["tools"][0]["function"]["name"] == "final_result"


async def test_a_child_with_a_dataclass_output_reports_it_as_json() -> None:
    from taskloom import SubAgent

    child = ScriptedModel(['{"x": 1, "y": 2}'])
    helper = SubAgent("pointer", "Finds a point.", child, output_type=Point)
    parent = ScriptedModel([reply(tool_calls=[("pointer", {"task": "find it"})]), reply("ok")])
    result = await Agent(model=parent, tools=[helper]).run("go")
    assert result.status is RunStatus.COMPLETED
    report = json.loads(parent.requests[1].messages[-1].results[0].content)
    assert report["answer"] == {"x": 1, "y": 2}
