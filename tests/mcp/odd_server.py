"""An MCP server on the SDK's low-level `Server`, for what FastMCP never
sends: a tool name providers refuse, structured content that breaks the
tool's own `outputSchema`, and (with `bad-schema`) an input schema that is
not valid JSON schema.

    python odd_server.py [bad-schema]
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

READ_ONLY = types.ToolAnnotations(read_only_hint=True)
TOOLS = [
    types.Tool(
        name="files.read",
        description="Read a file (a dotted name, as some servers use).",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        annotations=READ_ONLY,
    ),
    types.Tool(
        name="weather",
        description="Structured output that breaks its own schema.",
        input_schema={"type": "object", "properties": {}},
        output_schema={
            "type": "object",
            "properties": {"celsius": {"type": "number"}},
            "required": ["celsius"],
        },
        annotations=READ_ONLY,
    ),
]
BROKEN = types.Tool(
    name="broken",
    input_schema={"type": "object", "properties": {"when": {"type": "moment"}}},
    annotations=READ_ONLY,
)


async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
    extra = [BROKEN] if "bad-schema" in sys.argv[1:] else []
    return types.ListToolsResult(tools=[*TOOLS, *extra])


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    if params.name == "files.read":
        path = (params.arguments or {}).get("path")
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"read {path}")])
    return types.CallToolResult(
        content=[types.TextContent(type="text", text='{"celsius": "warm"}')],
        structured_content={"celsius": "warm"},
    )


server: Server[Any] = Server("odd", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
