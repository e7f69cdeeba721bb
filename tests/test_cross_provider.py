"""One session, several wire APIs: the transcript stays acceptable to each.

Anthropic answers first (thinking with a signature, a tool call); a round
strategy switches the session to OpenAI Chat Completions, then to the
Responses API; another run goes between Anthropic, Gemini and Chat
Completions and back to Gemini. Thinking and thought signatures go only back
to the provider that produced them, and call ids are ones every provider
accepts.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from taskloom import Agent, RunOptions, Runtime, ToolEffect, tool
from taskloom.loop import Continue, RoundAdjustment, RoundContext, RoundDecision
from taskloom.models import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel
from taskloom.testing.transport import RecordingTransport

# Google's documented placeholder for a call that carries no thought signature.
SKIP_SIGNATURE = base64.b64encode(b"skip_thought_signature_validator").decode()


@tool(effect=ToolEffect.READ_ONLY)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def wire(answer: dict[str, Any]) -> RecordingTransport:
    """A provider answering every request with the same canned JSON."""
    return RecordingTransport(default=RecordingTransport.json(answer))


ANTHROPIC = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "thinking", "thinking": "I should look it up.", "signature": "sig-abc"},
        {"type": "tool_use", "id": "toolu_01A", "name": "lookup", "input": {"key": "alpha"}},
    ],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 10, "output_tokens": 5},
}
CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4.1-mini",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_B",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"key": "beta"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
}
RESPONSES = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "model": "gpt-5-mini",
    "output": [
        {
            "type": "message",
            "id": "msg_r",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "alpha and beta looked up", "annotations": []}
            ],
        }
    ],
    "usage": {"input_tokens": 30, "output_tokens": 6, "total_tokens": 36},
}


class SwitchEachRound:
    def __init__(self, *models: Any) -> None:
        self.models = list(models)

    async def on_round(self, ctx: RoundContext) -> RoundDecision:
        if self.models:
            return Continue(RoundAdjustment(model=self.models.pop(0)))
        return RoundDecision.proceed()


async def test_a_session_moves_between_providers() -> None:
    anthropic_wire, chat_wire, responses_wire = wire(ANTHROPIC), wire(CHAT), wire(RESPONSES)
    first = AnthropicModel(
        "claude-sonnet-4-5", api_key="k", http_client=anthropic_wire.client(), stream=False
    )
    second = OpenAIChatModel(
        "gpt-4.1-mini", api_key="k", http_client=chat_wire.client(), stream=False
    )
    third = OpenAIResponsesModel(
        "gpt-5-mini", api_key="k", http_client=responses_wire.client(), stream=False
    )
    session = await Runtime().create_session(Agent("multi", first, "Be brief.", tools=[lookup]))
    result = await session.run(
        "look up alpha and beta", options=RunOptions(strategy=SwitchEachRound(second, third))
    )
    assert result.text == "alpha and beta looked up"

    chat = chat_wire.body(0)
    roles = [m["role"] for m in chat["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    assistant = chat["messages"][2]
    assert "thinking" not in json.dumps(assistant) and "sig-abc" not in json.dumps(chat)
    call_id = assistant["tool_calls"][0]["id"]
    assert chat["messages"][3]["tool_call_id"] == call_id
    assert chat["messages"][3]["content"] == "value of alpha"

    responses = responses_wire.body(0)
    kinds = [item.get("type", "message") for item in responses["input"]]
    assert kinds.count("function_call") == 2 and kinds.count("function_call_output") == 2
    assert "sig-abc" not in json.dumps(responses)  # Anthropic thinking is not sent to OpenAI
    calls = [i for i in responses["input"] if i.get("type") == "function_call"]
    outputs = [i for i in responses["input"] if i.get("type") == "function_call_output"]
    assert [c["call_id"] for c in calls] == [o["call_id"] for o in outputs]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", c["call_id"]) for c in calls)
    assert [o["output"] for o in outputs] == ["value of alpha", "value of beta"]


async def test_thinking_goes_back_to_the_provider_that_made_it() -> None:
    final = dict(ANTHROPIC, content=[{"type": "text", "text": "done"}], stop_reason="end_turn")
    server = RecordingTransport(RecordingTransport.json(ANTHROPIC), RecordingTransport.json(final))
    model = AnthropicModel(
        "claude-sonnet-4-5", api_key="k", http_client=server.client(), stream=False
    )
    await Agent("a", model, tools=[lookup]).run("x")
    replayed = server.body(1)["messages"][1]["content"]
    assert replayed[0] == {
        "type": "thinking",
        "thinking": "I should look it up.",
        "signature": "sig-abc",
    }
    assert replayed[1]["type"] == "tool_use" and replayed[1]["id"] == "toolu_01A"


GEMINI_CALL = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [
                    {"text": "Beta next.", "thought": True},
                    {
                        "functionCall": {"name": "lookup", "args": {"key": "beta"}},
                        "thoughtSignature": "CiQBcsjafGemini+sig/A==",
                    },
                ],
            },
            "finishReason": "STOP",
        }
    ],
    "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 5, "thoughtsTokenCount": 9},
    "modelVersion": "gemini-3-pro-preview",
    "responseId": "g-1",
}
GEMINI_TEXT = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [{"text": "alpha, beta and gamma", "thoughtSignature": "CiQBtext/sig=="}],
            },
            "finishReason": "STOP",
        }
    ],
    "usageMetadata": {"promptTokenCount": 90, "candidatesTokenCount": 6},
    "modelVersion": "gemini-3-pro-preview",
    "responseId": "g-2",
}
CHAT_GAMMA = json.loads(json.dumps(CHAT).replace("beta", "gamma").replace("call_B", "call_G"))


async def test_a_session_moves_between_gemini_and_other_providers() -> None:
    """Anthropic, then Gemini, then Chat Completions, then Gemini again, in one run:
    each request is one its provider accepts. Gemini gets no other provider's
    thinking, a signature it accepts on calls it did not make, and its own turn back
    exactly as it came; the others get none of Gemini's signatures, and every call
    its result under the same id."""
    anthropic_wire, chat_wire = wire(ANTHROPIC), wire(CHAT_GAMMA)
    gemini_wire = RecordingTransport(
        RecordingTransport.json(GEMINI_CALL), RecordingTransport.json(GEMINI_TEXT)
    )
    first = AnthropicModel(
        "claude-sonnet-4-5", api_key="k", http_client=anthropic_wire.client(), stream=False
    )
    gemini = GeminiModel(
        "gemini-3-pro-preview", api_key="k", http_client=gemini_wire.client(), stream=False
    )
    chat = OpenAIChatModel(
        "gpt-4.1-mini", api_key="k", http_client=chat_wire.client(), stream=False
    )
    session = await Runtime().create_session(Agent("multi", first, "Be brief.", tools=[lookup]))
    result = await session.run(
        "look up alpha, beta and gamma",
        options=RunOptions(strategy=SwitchEachRound(gemini, chat, gemini)),
    )
    assert result.text == "alpha, beta and gamma"

    to_gemini = gemini_wire.body(0)
    assert "sig-abc" not in json.dumps(to_gemini)  # Anthropic's thinking stays with Anthropic
    user, claude_turn, results = to_gemini["contents"]
    assert user == {"role": "user", "parts": [{"text": "look up alpha, beta and gamma"}]}
    assert claude_turn["parts"] == [
        {
            "functionCall": {"name": "lookup", "args": {"key": "alpha"}, "id": "toolu_01A"},
            "thoughtSignature": SKIP_SIGNATURE,
        }
    ]
    assert results["parts"] == [
        {
            "functionResponse": {
                "name": "lookup",
                "response": {"output": "value of alpha"},
                "id": "toolu_01A",
            }
        }
    ]

    to_chat = chat_wire.body(0)
    for secret in ("sig-abc", "CiQBcsjafGemini", "Beta next."):  # nobody's thinking
        assert secret not in json.dumps(to_chat)
    assert [m["role"] for m in to_chat["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    gemini_call = to_chat["messages"][4]["tool_calls"][0]
    assert gemini_call["function"] == {"name": "lookup", "arguments": '{"key":"beta"}'}
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", gemini_call["id"])
    assert to_chat["messages"][5]["tool_call_id"] == gemini_call["id"]

    again = gemini_wire.body(1)["contents"]
    assert [c["role"] for c in again] == ["user", "model", "user", "model", "user", "model", "user"]
    own_turn = again[3]["parts"]
    assert own_turn == [
        {"text": "Beta next.", "thought": True},
        {
            "functionCall": {"name": "lookup", "args": {"key": "beta"}, "id": gemini_call["id"]},
            "thoughtSignature": "CiQBcsjafGemini+sig/A==",
        },
    ]
    chat_turn = again[5]["parts"]
    assert chat_turn[0]["thoughtSignature"] == SKIP_SIGNATURE
    assert chat_turn[0]["functionCall"]["id"] == "call_G"
    assert again[6]["parts"][0]["functionResponse"]["id"] == "call_G"
