"""What the GenAI conventions want in attribute values, made from taskloom values:
the JSON of `gen_ai.system_instructions`, `gen_ai.input.messages` and
`gen_ai.output.messages`, capped in size; provider names and server
addresses as the conventions spell them. Nothing here reads headers or keys:
values are made from messages, names and URLs without their user-info.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from ..loop.ports import AgentSpec
from ..messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult, Usage

MAX_CONTENT_CHARS = 16_384
"""The default cap, in characters, of one content attribute's value."""

_TRUNCATED = "…[truncated]"

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_call",
    "max_tokens": "length",
    "content_filter": "content_filter",
    "refusal": "content_filter",
    "error": "error",
}

_PROVIDERS = {"openai-responses": "openai", "google": "gcp.gemini", "vertex": "gcp.vertex_ai"}


def provider_name(provider: str) -> str:
    """`gen_ai.provider.name` for a taskloom provider (both OpenAI APIs are `openai`;
    Gemini is `gcp.gemini` on the Gemini API and `gcp.vertex_ai` on Vertex AI)."""
    return _PROVIDERS.get(provider, provider)


def finish_reason(stop_reason: str) -> str:
    """The conventions' finish reason for a taskloom stop reason."""
    return _FINISH.get(stop_reason, stop_reason)


def input_tokens(usage: Usage, provider: str) -> int:
    """Input tokens as the conventions count them, cached ones included
    (Anthropic reports those apart from `input_tokens`)."""
    if provider == "anthropic":
        return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return usage.input_tokens


@lru_cache(maxsize=64)
def server_of(base_url: str) -> tuple[str, int] | None:
    """`server.address` and `server.port` of a model's base URL (never its user-info)."""
    try:
        parts = urlsplit(base_url)
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return (host, port) if host else None


def agent_id(agent: AgentSpec) -> str:
    """A digest of the agent's definition (name, instructions, tool names):
    equal ids are the same agent, a changed prompt or tool set is another."""
    definition = json.dumps([agent.name, agent.instructions, sorted(t.name for t in agent.tools)])
    return hashlib.sha256(definition.encode()).hexdigest()[:16]


def capped(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with a marker when longer."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(_TRUNCATED))] + _TRUNCATED


def capped_json(items: list[dict[str, Any]], limit: int) -> str:
    """`items` as valid JSON of about `limit` characters at most: texts cut, then the
    oldest items dropped, then the last item's texts cut shorter."""
    items = [_cut_texts(item, limit) for item in items]
    text = json.dumps(items, ensure_ascii=False)
    while len(text) > limit and len(items) > 1:
        items = items[1:]
        text = json.dumps(items, ensure_ascii=False)
    share = limit // 2
    while len(text) > limit and share > 16:
        items = [_cut_texts(item, share) for item in items]
        text = json.dumps(items, ensure_ascii=False)
        share //= 2
    return text


def _cut_texts(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return capped(value, limit)
    if isinstance(value, dict):
        return {k: _cut_texts(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_texts(v, limit) for v in value]
    return value


def message_parts(message: Message) -> list[dict[str, Any]]:
    """A message's `parts` as `gen_ai.input.messages` and `gen_ai.output.messages` hold them."""
    parts: list[dict[str, Any]] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, ToolCall):
            arguments: Any = (
                block.raw_arguments if block.raw_arguments is not None else block.arguments
            )
            parts.append(
                {"type": "tool_call", "id": block.id, "name": block.name, "arguments": arguments}
            )
        elif isinstance(block, ToolResult):
            parts.append(
                {"type": "tool_call_response", "id": block.tool_call_id, "response": block.content}
            )
        elif isinstance(block, ThinkingBlock):
            if block.text and not block.redacted:
                parts.append({"type": "reasoning", "content": block.text})
        elif isinstance(block, ImageBlock):
            # Image bytes stay out of traces; a URL is a reference, kept.
            if block.url is not None:
                parts.append(
                    {
                        "type": "uri",
                        "modality": "image",
                        "mime_type": block.media_type,
                        "uri": block.url,
                    }
                )
            else:
                parts.append({"type": "image", "mime_type": block.media_type})
    return parts
