"""One tool of an MCP server, as a taskloom `Tool`, and what the model reads
of its results (`to_output`).

Effect and approval come from the server's annotations (`readOnlyHint`
makes it `READ_ONLY`); the input schema is checked once, when listed.
`structuredContent` is the answer as compact JSON; images, audio and
resources become lines naming what they are.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import mcp_types as types

from .._redact import redact
from ..errors import ConfigurationError
from ..tools import ApprovalRule, Tool, ToolContext, ToolEffect, ToolOutput

if TYPE_CHECKING:
    from ._connection import Connection
    from ._server import MCPServer
    from ._taskcalls import TaskCalls

Approval = Literal["destructive", "always", "never"] | Callable[[str, dict[str, Any]], bool]
"""Which calls of an MCP server's tools park for approval: `"destructive"`
(tools that may destroy, see `is_destructive`), `"always"`, `"never"`, or a
predicate on (the tool's name on the server, the call's arguments)."""


def is_destructive(annotations: types.ToolAnnotations | None) -> bool:
    """Whether a tool may destroy something, by the MCP spec's defaults: a
    tool that is not `readOnlyHint: true` is destructive unless it says
    `destructiveHint: false` (unannotated tools are)."""
    if annotations is None:
        return True
    if annotations.read_only_hint:
        return False
    return annotations.destructive_hint is not False


def model_name(remote: str, prefix: str | None) -> str:
    """The name the model calls a server's tool by: with the prefix, and with
    the characters providers refuse in tool names (MCP allows `.` and `/`)
    turned into `_`."""
    name = f"{prefix}_{remote}" if prefix else remote
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def _approval_rule(approval: Approval, remote: types.Tool) -> ApprovalRule:
    if approval == "destructive":
        return is_destructive(remote.annotations)
    if approval == "always":
        return True
    if approval == "never":
        return False
    assert callable(approval)  # `MCPServer` checked it
    name = remote.name
    return lambda arguments: bool(approval(name, arguments))


class MCPTool(Tool):
    """A tool of an MCP server, named `remote_name` there, called through a
    runtime's `connection` (as an MCP task through its `calls`)."""

    __slots__ = ("calls", "connection", "remote", "remote_name", "server")

    def __init__(
        self, server: MCPServer, remote: types.Tool, connection: Connection, calls: TaskCalls
    ) -> None:
        name = model_name(remote.name, server.prefix)
        annotations = remote.annotations
        read_only = annotations is not None and annotations.read_only_hint is True
        try:
            super().__init__(
                name,
                remote.description or (annotations.title if annotations else None) or "",
                remote.input_schema,
                effect=ToolEffect.READ_ONLY if read_only else ToolEffect.WRITE,
                needs_approval=_approval_rule(server.approval, remote),
                max_output_chars=server.max_output_chars,
            )
            _check_schema(remote.input_schema)
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"MCP server {server.name!r} offers a tool the model cannot use "
                f"({remote.name!r}): {exc}"
            ) from None
        self.server = server
        self.remote = remote
        self.remote_name = remote.name
        self.connection = connection
        self.calls = calls
        self.secrets = server.secrets

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r}, server={self.server.name!r}, effect={self.effect.value})"

    async def invoke(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        """Call the tool on the server: as an MCP task when the server runs it
        as one and its `task_mode` is not `"never"`."""
        server, connection, remote = self.server, self.connection, self.remote_name

        async def report(progress: float, total: float | None, message: str | None) -> None:
            text = message or (f"{progress:g}/{total:g}" if total else f"{progress:g}")
            ctx.progress(redact(text, self.secrets), progress=progress, total=total)

        mode = server.task_mode(remote)
        if mode != "never" and await connection.task_capable(self.remote):
            wait = 0.0 if mode == "always" else server.task_after
            return await self.calls.call(server, connection, remote, arguments, ctx, wait)
        return to_output(
            await connection.call(
                remote, arguments, timeout=server.timeout, progress=report, stop=ctx.stop
            )
        )


def _check_schema(schema: dict[str, Any]) -> None:
    from jsonschema import exceptions, validators

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as exc:
        raise ConfigurationError(
            f"its input schema is not valid JSON schema: {exc.message}"
        ) from None


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
