"""taskloom: a Python runtime for tool-using LLM agents.

Define an `Agent` (model, instructions, tools), run it in a `Session` of a
`Runtime`, and control every round: strategies, budgets, deadlines, graceful
stop, approvals. See the README for a tour.
"""

from __future__ import annotations

from ._lazy import lazy_exports
from .agent import Agent
from .errors import (
    ApprovalConflict,
    ApprovalsMissing,
    AuthenticationError,
    ConfigurationError,
    ContextWindowExceeded,
    InvalidRequest,
    ModelScriptExhausted,
    ProviderError,
    ProviderOverloaded,
    RateLimitError,
    SessionNotFound,
    StaleLeaseError,
    TaskloomError,
    TransportError,
)
from .events import (
    ApprovalRequested,
    Event,
    ModelRequestStarted,
    NoticeDelivered,
    RetryAttempt,
    RoundCommitted,
    RunFinished,
    RunStarted,
    SubagentFinished,
    SubagentStarted,
    TextDelta,
    ThinkingDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolProgress,
    WorkFinished,
)
from .loop import (
    Continue,
    Deferred,
    DeferredItem,
    Inject,
    PendingCall,
    ReasoningChange,
    RoundAdjustment,
    RoundBoundary,
    RoundContext,
    RoundDecision,
    RoundStrategy,
    RoundToolResult,
    RunOptions,
    RunResult,
    RunStatus,
    RunStream,
    Stop,
    StopSignal,
    ToolContext,
)
from .messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult, Usage
from .models.base import Model, ModelRequest, ModelResponse, ModelSettings, ReasoningOptions
from .models.retry import RetryPolicy
from .runtime import Runtime, Session
from .tools import Tool, ToolEffect, ToolError, ToolOutput, tool

__all__ = [
    "Agent",
    "ApprovalConflict",
    "ApprovalRequested",
    "ApprovalsMissing",
    "AuthenticationError",
    "ConfigurationError",
    "ContextWindowExceeded",
    "Continue",
    "Deferred",
    "DeferredItem",
    "Event",
    "ImageBlock",
    "Inject",
    "InvalidRequest",
    "Message",
    "Model",
    "ModelRequest",
    "ModelRequestStarted",
    "ModelResponse",
    "ModelScriptExhausted",
    "ModelSettings",
    "NoticeDelivered",
    "PendingCall",
    "ProviderError",
    "ProviderOverloaded",
    "RateLimitError",
    "ReasoningChange",
    "ReasoningOptions",
    "RetryAttempt",
    "RetryPolicy",
    "RoundAdjustment",
    "RoundBoundary",
    "RoundCommitted",
    "RoundContext",
    "RoundDecision",
    "RoundStrategy",
    "RoundToolResult",
    "RunFinished",
    "RunOptions",
    "RunResult",
    "RunStarted",
    "RunStatus",
    "RunStream",
    "Runtime",
    "Session",
    "SessionNotFound",
    "StaleLeaseError",
    "Stop",
    "StopSignal",
    "SubagentFinished",
    "SubagentStarted",
    "TaskloomError",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "ThinkingDelta",
    "Tool",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolContext",
    "ToolEffect",
    "ToolError",
    "ToolOutput",
    "ToolProgress",
    "ToolResult",
    "TransportError",
    "Usage",
    "WorkFinished",
    "tool",
]
__version__ = "0.1.0"

# Delegation, background values and stores are part of the public surface but
# import on first use, so `import taskloom` stays as cheap as pydantic alone.
_LAZY = {
    "SubAgent": "taskloom.delegation",
    "Spawner": "taskloom.delegation",
    "WorkerType": "taskloom.delegation",
    "console_tools": "taskloom.delegation",
    "ChildSpec": "taskloom.delegation",
    "ChildStatus": "taskloom.delegation",
    "ChildWorker": "taskloom.delegation",
    "Dispatcher": "taskloom.delegation",
    "InlineDispatcher": "taskloom.delegation",
    "TaskDispatcher": "taskloom.delegation",
    "BackgroundActivity": "taskloom.background",
    "BackgroundNotice": "taskloom.background",
    "MemoryActivityRegistry": "taskloom.background",
    "MemoryNoticeInbox": "taskloom.background",
    "Lifecycle": "taskloom.background",
    "Listeners": "taskloom.background",
    "RunNotices": "taskloom.background",
    "Delivery": "taskloom.background",
    "background_tools": "taskloom.tools",
    "SessionStore": "taskloom.stores",
    "MemoryStore": "taskloom.stores",
    "Entry": "taskloom.stores",
    "resolve_model": "taskloom.models",
    "ScriptedModel": "taskloom.models",
    "FunctionModel": "taskloom.models",
    "reply": "taskloom.models",
}


__getattr__ = lazy_exports(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
