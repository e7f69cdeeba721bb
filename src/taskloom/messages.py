"""Provider-neutral messages, content blocks and token usage.

Values only: nothing here knows a wire format, a run or a store. Every value
round-trips through plain JSON (`to_dict` / `from_dict`) so that a session log
can be written by one process and read by another.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

__all__ = [
    "Block",
    "ImageBlock",
    "Message",
    "Role",
    "TextBlock",
    "ThinkingBlock",
    "ToolCall",
    "ToolResult",
    "Usage",
]

Role: TypeAlias = Literal["user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class TextBlock:
    """Plain text."""

    text: str
    type: Literal["text"] = field(default="text", init=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value."""
        return {"type": "text", "text": self.text}


@dataclass(frozen=True, slots=True)
class ThinkingBlock:
    """Reasoning the model produced.

    `signature` (Anthropic's signature, or OpenAI Responses' encrypted
    reasoning content) and `data` (a redacted block's opaque payload) are kept
    verbatim. `provider` names the wire API that produced the block: adapters
    replay thinking only to that same provider and drop it for any other.
    """

    text: str = ""
    signature: str | None = None
    redacted: bool = False
    data: str | None = None
    provider: str | None = None
    id: str | None = None
    type: Literal["thinking"] = field(default="thinking", init=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value."""
        out: dict[str, Any] = {"type": "thinking", "text": self.text}
        if self.signature is not None:
            out["signature"] = self.signature
        if self.redacted:
            out["redacted"] = True
        if self.data is not None:
            out["data"] = self.data
        if self.provider is not None:
            out["provider"] = self.provider
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model asked for.

    `arguments` is the parsed JSON object. When the model sent arguments that
    are not a JSON object, `arguments` is empty and `raw_arguments` keeps what
    it sent, so the loop can answer with an error the model can act on.
    `provider_id` keeps a provider's own item id (OpenAI Responses) apart from
    the call id used to pair results.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw_arguments: str | None = None
    provider_id: str | None = None
    type: Literal["tool_call"] = field(default="tool_call", init=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value."""
        out: dict[str, Any] = {
            "type": "tool_call",
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
        }
        if self.raw_arguments is not None:
            out["raw_arguments"] = self.raw_arguments
        if self.provider_id is not None:
            out["provider_id"] = self.provider_id
        return out


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The one result a tool call gets; `is_error` marks in-band errors."""

    tool_call_id: str
    content: str
    is_error: bool = False
    tool_name: str = ""
    type: Literal["tool_result"] = field(default="tool_result", init=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value."""
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_call_id": self.tool_call_id,
            "content": self.content,
            "tool_name": self.tool_name,
        }
        if self.is_error:
            out["is_error"] = True
        return out


@dataclass(frozen=True, slots=True)
class ImageBlock:
    """An image, either inline bytes (`data` + `media_type`) or a `url`."""

    data: bytes | None = None
    media_type: str = "image/png"
    url: str | None = None
    type: Literal["image"] = field(default="image", init=False)

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise ValueError("ImageBlock takes exactly one of data= or url=")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value."""
        out: dict[str, Any] = {"type": "image", "media_type": self.media_type}
        if self.data is not None:
            out["data"] = base64.b64encode(self.data).decode("ascii")
        else:
            out["url"] = self.url
        return out

    @property
    def base64(self) -> str:
        """The inline bytes as base64 text (empty for a URL image)."""
        return base64.b64encode(self.data).decode("ascii") if self.data is not None else ""


Block: TypeAlias = TextBlock | ThinkingBlock | ToolCall | ToolResult | ImageBlock


def _block_from_dict(d: Mapping[str, Any]) -> Block:
    kind = d["type"]
    if kind == "text":
        return TextBlock(d["text"])
    if kind == "thinking":
        return ThinkingBlock(
            text=d.get("text", ""),
            signature=d.get("signature"),
            redacted=d.get("redacted", False),
            data=d.get("data"),
            provider=d.get("provider"),
            id=d.get("id"),
        )
    if kind == "tool_call":
        return ToolCall(
            id=d["id"],
            name=d["name"],
            arguments=dict(d.get("arguments") or {}),
            raw_arguments=d.get("raw_arguments"),
            provider_id=d.get("provider_id"),
        )
    if kind == "tool_result":
        return ToolResult(
            tool_call_id=d["tool_call_id"],
            content=d["content"],
            is_error=d.get("is_error", False),
            tool_name=d.get("tool_name", ""),
        )
    if kind == "image":
        if "data" in d:
            return ImageBlock(data=base64.b64decode(d["data"]), media_type=d["media_type"])
        return ImageBlock(url=d["url"], media_type=d.get("media_type", "image/png"))
    raise ValueError(f"unknown block type {kind!r}")


@dataclass(frozen=True, slots=True)
class Message:
    """One turn of a conversation: a role and its blocks.

    Roles: `user`, `assistant`, and `tool` (a message carrying only
    `ToolResult` blocks, answering the previous assistant turn). `provider`
    and `model` name who produced an assistant message.
    """

    role: Role
    blocks: tuple[Block, ...]
    provider: str | None = None
    model: str | None = None
    origin: str = ""

    @classmethod
    def user(cls, content: str | Iterable[Block]) -> Message:
        """A user turn from text or blocks."""
        if isinstance(content, str):
            return cls("user", (TextBlock(content),))
        return cls("user", tuple(content))

    @classmethod
    def assistant(
        cls,
        text: str | None = None,
        *,
        tool_calls: Sequence[ToolCall] = (),
        thinking: Sequence[ThinkingBlock] = (),
        provider: str | None = None,
        model: str | None = None,
    ) -> Message:
        """An assistant turn: thinking first, then text, then tool calls."""
        blocks: list[Block] = list(thinking)
        if text:
            blocks.append(TextBlock(text))
        blocks.extend(tool_calls)
        return cls("assistant", tuple(blocks), provider=provider, model=model)

    @classmethod
    def tool_results(cls, results: Iterable[ToolResult]) -> Message:
        """The results answering one assistant turn, in call order."""
        return cls("tool", tuple(results))

    @property
    def text(self) -> str:
        """The text blocks joined (thinking excluded)."""
        parts = [b.text for b in self.blocks if isinstance(b, TextBlock)]
        return parts[0] if len(parts) == 1 else "".join(parts)

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls, in the order the model made them."""
        return [b for b in self.blocks if isinstance(b, ToolCall)]

    @property
    def results(self) -> list[ToolResult]:
        """The tool results this message carries."""
        return [b for b in self.blocks if isinstance(b, ToolResult)]

    @property
    def thinking(self) -> list[ThinkingBlock]:
        """The thinking blocks this message carries."""
        return [b for b in self.blocks if isinstance(b, ThinkingBlock)]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value."""
        out: dict[str, Any] = {"role": self.role, "blocks": [b.to_dict() for b in self.blocks]}
        if self.provider is not None:
            out["provider"] = self.provider
        if self.model is not None:
            out["model"] = self.model
        if self.origin:
            out["origin"] = self.origin
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Message:
        """The value `to_dict` described."""
        return cls(
            role=d["role"],
            blocks=tuple(_block_from_dict(b) for b in d["blocks"]),
            provider=d.get("provider"),
            model=d.get("model"),
            origin=d.get("origin", ""),
        )


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one or more model requests; `+` adds them up.

    Figures are as the provider reports them (and its SDK parses them):
    OpenAI's input includes cached tokens, Anthropic's `input_tokens` excludes
    cache reads and writes, which are counted apart in `cache_read_tokens` and
    `cache_write_tokens`. `requests` counts model requests.

    `estimated` is true when some of the figures were not reported by the
    provider but estimated from the length of the text (about four characters
    a token), as for a server that streams no usage; token budgets count the
    estimate. A sum is estimated when any of its parts is.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    requests: int = 0
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.requests + other.requests,
            self.estimated or other.estimated,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens: what token budgets count."""
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, int]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value.

        `estimated` appears only when true, so reported usage keeps its shape.
        """
        out = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "requests": self.requests,
        }
        if self.estimated:
            out["estimated"] = True
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Usage:
        """The value `to_dict` described."""
        counts = {k: int(d.get(k, 0)) for k in cls.__dataclass_fields__ if k != "estimated"}
        return cls(**counts, estimated=bool(d.get("estimated", False)))
