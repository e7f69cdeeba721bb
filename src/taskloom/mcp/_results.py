"""What the model reads of an MCP tool's result.

Text content is the text. `structuredContent` is the answer, as compact JSON
(the text blocks beside it repeat it and are left out). An image or audio
block becomes a line naming its MIME type and size, an embedded resource its
text (a binary one a line), a resource link a line with its URI.
"""

from __future__ import annotations

import base64
import binascii
import json

import mcp_types as types

from ..tools import ToolOutput

__all__ = ["to_output"]


def to_output(result: types.CallToolResult) -> ToolOutput:
    """The tool result the model reads for `result`."""
    if result.structured_content is not None and not result.is_error:
        extra = [_describe(b) for b in result.content if not isinstance(b, types.TextContent)]
        answer = json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))
        return ToolOutput("\n".join([answer, *extra]))
    text = "\n".join(_describe(b) for b in result.content)
    if not text:
        text = "(the server reported an error without a message)" if result.is_error else ""
    return ToolOutput(text or "(no output)", is_error=result.is_error)


def _describe(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind}: {block.mime_type}, {_size(block.data)}]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        mime = resource.mime_type or "application/octet-stream"
        return f"[resource {resource.uri}: {mime}, {_size(resource.blob)}]"
    if isinstance(block, types.ResourceLink):
        mime = f", {block.mime_type}" if block.mime_type else ""
        return f"[resource link {block.name}: {block.uri}{mime}]"
    return f"[{getattr(block, 'type', 'unknown')} content]"


def _size(data: str) -> str:
    try:
        size = len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return "undecodable data"
    return f"{size:,} bytes"
