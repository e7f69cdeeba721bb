"""Whole runs on the Gemini wire, against the fake server on loopback.

A two-round tool run (parallel calls answered by id and name), a streamed
run whose answer is structured output, the same on Vertex AI's paths, and
transport retries that honour the `RetryInfo` delay Gemini sends in the body.
"""

from __future__ import annotations

import json

import pydantic

from taskloom import Agent, RetryPolicy, RunOptions, RunStatus, Runtime, ToolEffect, tool
from taskloom.events import RetryAttempt, RunFinished, TextDelta
from taskloom.messages import Usage
from taskloom.models import GeminiModel
from taskloom.testing.fake_server import FakeServer


@tool(effect=ToolEffect.READ_ONLY)
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool(effect=ToolEffect.READ_ONLY)
def clock() -> str:
    """The time."""
    return "noon"


class Forecast(pydantic.BaseModel):
    city: str
    sky: str
    high: int


async def test_a_two_round_tool_run() -> None:
    async with FakeServer(api_key="k-gemini-test") as server:
        server.script(
            FakeServer.reply(
                tool_calls=[("weather", {"city": "Paris"}), ("clock", {})],
                usage=Usage(input_tokens=40, output_tokens=12, reasoning_tokens=5),
            ),
            FakeServer.reply("Sunny in Paris at noon.", usage=Usage(60, 8)),
        )
        model = GeminiModel(
            "gemini-2.5-flash", api_key="k-gemini-test", base_url=server.gemini_base_url
        )
        agent = Agent("forecaster", model, "Be brief.", tools=[weather, clock])
        result = await agent.run("Weather and time in Paris?")
    assert result.status is RunStatus.COMPLETED
    assert result.text == "Sunny in Paris at noon."
    assert (result.rounds, result.model_requests) == (2, 2)
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (100, 20, 5)

    first, second = (r.body for r in server.requests)
    assert all(":streamGenerateContent?alt=sse" in r.path for r in server.requests)
    assert first["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    declared = [d["name"] for d in first["tools"][0]["functionDeclarations"]]
    assert declared == ["weather", "clock"]
    user, turn, results = second["contents"]
    assert user == {"role": "user", "parts": [{"text": "Weather and time in Paris?"}]}
    calls = [p["functionCall"] for p in turn["parts"]]
    assert [(c["name"], c["args"]) for c in calls] == [
        ("weather", {"city": "Paris"}),
        ("clock", {}),
    ]
    answers = [p["functionResponse"] for p in results["parts"]]
    assert [(a["id"], a["name"]) for a in answers] == [(c["id"], c["name"]) for c in calls]
    assert [a["response"] for a in answers] == [{"output": "sunny in Paris"}, {"output": "noon"}]


async def test_a_streamed_structured_output_run() -> None:
    forecast = {"city": "Paris", "sky": "clear", "high": 24}
    text = json.dumps(forecast)
    pieces = [text[i : i + 9] for i in range(0, len(text), 9)]
    async with FakeServer() as server:
        server.script(FakeServer.reply(pieces))
        model = GeminiModel(
            "gemini-3-flash-preview", api_key="k-gemini-test", base_url=server.gemini_base_url
        )
        assert model.native_output
        events = [e async for e in Agent("a", model, output_type=Forecast).stream("Paris?")]
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == pieces  # the answer arrived in pieces
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    assert finished.result.status is RunStatus.COMPLETED
    assert finished.result.output == Forecast(city="Paris", sky="clear", high=24)
    (sent,) = server.requests
    assert sent.path.endswith(":streamGenerateContent?alt=sse")
    config = sent.body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert set(config["responseJsonSchema"]["properties"]) == {"city", "sky", "high"}


async def test_structured_output_before_gemini_3_goes_through_the_final_answer_tool() -> None:
    forecast = {"city": "Oslo", "sky": "snow", "high": -2}
    async with FakeServer() as server:
        server.script(
            FakeServer.reply(tool_calls=[("weather", {"city": "Oslo"})]),
            FakeServer.reply(tool_calls=[("final_result", forecast)]),
        )
        model = GeminiModel(
            "gemini-2.5-flash", api_key="k-gemini-test", base_url=server.gemini_base_url
        )
        agent = Agent("a", model, tools=[weather], output_type=Forecast)
        result = await agent.run("Oslo?")
    assert result.output == Forecast(city="Oslo", sky="snow", high=-2)
    for sent in server.requests:
        assert "responseJsonSchema" not in sent.body.get("generationConfig", {})
        names = [d["name"] for d in sent.body["tools"][0]["functionDeclarations"]]
        assert names == ["weather", "final_result"]


async def test_a_run_on_vertex_ai_paths_with_a_bearer_token() -> None:
    async with FakeServer(api_key="ya29.vertex-token") as server:
        server.script(FakeServer.reply(tool_calls=[("clock", {})]), FakeServer.reply("Noon."))
        model = GeminiModel.vertex(
            "gemini-2.5-flash", base_url=server.vertex_base_url, token="ya29.vertex-token"
        )
        result = await Agent("a", model, tools=[clock]).run("time?")
    assert result.text == "Noon."
    assert [r.path for r in server.requests] == [
        "/v1beta1/projects/fake/locations/global/publishers/google/models/"
        "gemini-2.5-flash:streamGenerateContent?alt=sse"
    ] * 2
    assert all(r.headers["authorization"] == "Bearer ya29.vertex-token" for r in server.requests)


async def test_a_rate_limited_request_waits_the_retry_info_delay_then_succeeds() -> None:
    policy = RetryPolicy(max_retries=3, initial_delay=0.001, max_delay=0.002, max_retry_after=5)
    async with FakeServer() as server:
        server.script(
            FakeServer.rate_limit(retry_after=0.25),
            FakeServer.error(503),
            FakeServer.reply("Here."),
        )
        model = GeminiModel(
            "gemini-2.5-flash", api_key="k-gemini-test", base_url=server.gemini_base_url
        )
        retries: list[RetryAttempt] = []
        async with Runtime() as runtime:
            session = await runtime.create_session(Agent("a", model))
            result = await session.run(
                "hi",
                options=RunOptions(retry=policy),
                emit=lambda e: retries.append(e) if isinstance(e, RetryAttempt) else None,
            )
    assert result.text == "Here." and result.transport_retries == 2
    assert len(server.requests) == 3
    # The 429 carried no Retry-After header, only Google's RetryInfo in its body.
    assert (retries[0].status, retries[0].delay) == (429, 0.25)
    assert retries[1].status == 503 and retries[1].delay <= policy.max_delay
