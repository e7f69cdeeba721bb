"""Token estimates from text length, for servers that report no usage.

About four characters a token: close for English prose and code with the
common tokenizers, and the same rule every adapter (and `ScriptedModel`)
uses, so estimates add up consistently. An estimate is marked as one on
`Usage.estimated`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from ..messages import Message, TextBlock, ThinkingBlock, ToolCall, ToolResult, Usage
from ._base import ModelRequest

__all__ = ["CHARS_PER_TOKEN", "estimate_tokens", "estimated_usage", "request_chars"]

CHARS_PER_TOKEN = 4


def estimate_tokens(chars: int) -> int:
    """Tokens for `chars` characters of text, rounded up (0 for none)."""
    return -(-max(0, chars) // CHARS_PER_TOKEN)


def _message_chars(messages: Iterable[Message], *, thinking: bool) -> int:
    total = 0
    for message in messages:
        for block in message.blocks:
            if isinstance(block, TextBlock) or (thinking and isinstance(block, ThinkingBlock)):
                total += len(block.text)
            elif isinstance(block, ToolResult):
                total += len(block.content)
            elif isinstance(block, ToolCall):
                total += len(block.name) + len(
                    block.raw_arguments
                    if block.raw_arguments is not None
                    else json.dumps(block.arguments)
                )
    return total


def request_chars(request: ModelRequest) -> int:
    """The characters of everything a request puts before the model.

    The system prompt, every message's text, tool calls and results, and the
    tools' names, descriptions and schemas (servers render them into the
    prompt too); earlier thinking and images are not counted.
    """
    total = len(request.system or "") + _message_chars(request.messages, thinking=False)
    for tool in request.tools:
        total += len(tool.name) + len(tool.description) + len(json.dumps(tool.input_schema))
    if request.output_schema is not None:
        total += len(json.dumps(request.output_schema))
    return total


def estimated_usage(request: ModelRequest, answer: Message) -> Usage:
    """The usage of one request estimated from its text and the answer's (marked estimated)."""
    return Usage(
        input_tokens=estimate_tokens(request_chars(request)),
        output_tokens=estimate_tokens(_message_chars((answer,), thinking=True)),
        requests=1,
        estimated=True,
    )
