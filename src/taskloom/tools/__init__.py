"""The tool contract: `Tool`, `@tool`, `ToolContext`, `Deferred`, effects and results.

A tool is a function the model may call. `@tool` builds its JSON schema from
the signature and its description from the docstring, once, at decoration.
What a running tool can reach (its identity, the run's controls, deferred
results) is its `ToolContext`. A `Toolset` (an MCP server) offers tools that
may change between rounds. A tool that needs what only the runtime offering
it has is an `UnboundTool` until that runtime binds it.
"""

from __future__ import annotations

from ._context import AgentView, Deferred, ToolContext, ToolHost
from ._decorator import as_tool, tool
from ._output import DEFAULT_MAX_OUTPUT_CHARS, ToolError, ToolOutput, cap_output
from ._tool import IDEMPOTENT_RETRIES, ApprovalRule, ArgumentsInvalid, Tool, ToolEffect, UnboundTool
from ._toolset import ToolCatalog, ToolLike, Toolset

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "IDEMPOTENT_RETRIES",
    "AgentView",
    "ApprovalRule",
    "ArgumentsInvalid",
    "Deferred",
    "Tool",
    "ToolCatalog",
    "ToolContext",
    "ToolEffect",
    "ToolError",
    "ToolHost",
    "ToolOutput",
    "ToolLike",
    "Toolset",
    "UnboundTool",
    "as_tool",
    "cap_output",
    "tool",
]
