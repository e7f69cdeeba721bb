"""taskloom: a Python runtime for tool-using LLM agents.

Define an `Agent` (model, instructions, tools), run it in a `Session` of a
`Runtime`, and control every round: strategies, budgets, deadlines, graceful
stop, approvals. See the README for a tour.

What a program needs is here; each name has one home besides (a package of
taskloom): events are in `taskloom.events`, round strategies and their
decisions in `taskloom.loop`, conflicts and store and background errors in
`taskloom.errors`, backends in `taskloom.backends`, test models in
`taskloom.models`, delegation's machinery in `taskloom.delegation`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# First, before any of taskloom's dataclasses is built (importing it
# installs the hook): their methods but `__init__` are compiled at first
# call, since a run calls few of them.
from . import _dataclass_methods  # noqa: F401
from ._lazy import lazy_exports
from ._output_type import OutputType
from ._run_controls import StopSignal
from .agent import Agent
from .errors import (
    APIKeyMissing,
    AuthenticationError,
    ConfigurationError,
    ContextWindowExceeded,
    InvalidRequest,
    ProviderError,
    ProviderOverloaded,
    RateLimitError,
    SessionBusy,
    SessionNotFound,
    TaskloomError,
    ToolDefinitionWarning,
    TransportError,
    UsageError,
)
from .loop import (
    Budget,
    Price,
    RunOptions,
    RunStream,
)
from .messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult, Usage
from .models import ModelRequest, ModelSettings, ReasoningOptions, RetryPolicy
from .results import PendingCall, PendingInput, RunResult, RunStatus
from .runtime import Runtime, Session
from .tools import Deferred, Tool, ToolContext, ToolEffect, ToolError, ToolOutput, tool

__all__ = [
    "Agent",
    "APIKeyMissing",
    "AuthenticationError",
    "Budget",
    "Compaction",
    "ConfigurationError",
    "ContextWindowExceeded",
    "Deferred",
    "DeferredItem",
    "ImageBlock",
    "InvalidRequest",
    "Message",
    "ModelRequest",
    "ModelSettings",
    "OutputType",
    "PendingCall",
    "PendingInput",
    "Price",
    "ProviderError",
    "ProviderOverloaded",
    "RateLimitError",
    "ReasoningOptions",
    "RetryPolicy",
    "RunOptions",
    "RunResult",
    "RunStatus",
    "RunStream",
    "Runtime",
    "Session",
    "SessionBusy",
    "SessionNotFound",
    "Spawner",
    "StopSignal",
    "SubAgent",
    "TaskloomError",
    "TextBlock",
    "ThinkingBlock",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionWarning",
    "ToolEffect",
    "ToolError",
    "ToolOutput",
    "ToolResult",
    "TransportError",
    "Usage",
    "UsageError",
    "background_tools",
    "console_tools",
    "tool",
]
__version__ = "0.1.0"

# Delegation and the background tools are part of the public surface but
# import on first use, so `import taskloom` stays as cheap as pydantic alone.
# So are the deferred items (`taskloom.entries` loads them at first use), and
# `Compaction` (a run without a policy never needs its machinery).
# Type checkers see them through the imports below.
if TYPE_CHECKING:
    from .background import background_tools
    from .delegation import Spawner, SubAgent, console_tools
    from .entries import DeferredItem
    from .loop import Compaction

_LAZY = {
    "SubAgent": "taskloom.delegation",
    "Spawner": "taskloom.delegation",
    "console_tools": "taskloom.delegation",
    "background_tools": "taskloom.background",
    "DeferredItem": "taskloom.entries",
    "Compaction": "taskloom.loop._compact",
}

__getattr__ = lazy_exports(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
