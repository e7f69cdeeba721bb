"""taskloom: a Python runtime for tool-using LLM agents.

Define an `Agent` (model, instructions, tools), run it in a `Session` of a
`Runtime`, and control every round: strategies, budgets, deadlines, graceful
stop, approvals. See the README for a tour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._lazy import lazy_exports
from .agent import Agent
from .errors import (
    AnswerConflict,
    ApprovalConflict,
    ApprovalsMissing,
    AuthenticationError,
    BackgroundCapReached,
    CommandNotStarted,
    ConfigurationError,
    ContextWindowExceeded,
    CorruptEntry,
    DeleteRefused,
    InvalidRequest,
    ModelScriptExhausted,
    ProviderError,
    ProviderOverloaded,
    RateLimitError,
    ReplayMismatch,
    SchemaNotMigrated,
    SessionBusy,
    SessionNotFound,
    StaleLeaseError,
    StoreError,
    StoreNotFound,
    StoreUnavailable,
    TaskloomError,
    ToolDefinitionWarning,
    TransportError,
    UsageError,
)
from .events import (
    ApprovalRequested,
    CompactionFinished,
    CompactionStarted,
    EmptyAnswer,
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
    Budget,
    BudgetLeft,
    Compaction,
    Continue,
    Inject,
    PendingCall,
    PendingInput,
    Price,
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
)
from .messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult, Usage
from .models import (
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ReasoningOptions,
    RetryPolicy,
)
from .runtime import Runtime, Session
from .tools import (
    Deferred,
    DeferredItem,
    Tool,
    ToolContext,
    ToolEffect,
    ToolError,
    ToolOutput,
    tool,
)

__all__ = [
    "Agent",
    "AnswerConflict",
    "ApprovalConflict",
    "ApprovalRequested",
    "ApprovalsMissing",
    "AuthenticationError",
    "BackgroundActivity",
    "BackgroundCapReached",
    "BackgroundNotice",
    "Budget",
    "BudgetLeft",
    "ChildSpec",
    "ChildStatus",
    "ChildWorker",
    "CommandNotStarted",
    "Compaction",
    "CompactionFinished",
    "CompactionStarted",
    "ConfigurationError",
    "ContextWindowExceeded",
    "Continue",
    "CorruptEntry",
    "DeleteRefused",
    "Deferred",
    "DeferredItem",
    "Delivery",
    "Dispatcher",
    "EmptyAnswer",
    "Entry",
    "Event",
    "FunctionModel",
    "ImageBlock",
    "Inject",
    "InlineDispatcher",
    "InvalidRequest",
    "Lifecycle",
    "Listeners",
    "MemoryActivityRegistry",
    "MemoryNoticeInbox",
    "MemoryStore",
    "Message",
    "Model",
    "ModelRequest",
    "ModelRequestStarted",
    "ModelResponse",
    "ModelScriptExhausted",
    "ModelSettings",
    "NoticeDelivered",
    "PendingCall",
    "PendingInput",
    "Price",
    "ProviderError",
    "ProviderOverloaded",
    "RateLimitError",
    "ReasoningChange",
    "ReasoningOptions",
    "ReplayMismatch",
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
    "RunNotices",
    "RunOptions",
    "RunResult",
    "RunStarted",
    "RunStatus",
    "RunStream",
    "Runtime",
    "SchemaNotMigrated",
    "ScriptedModel",
    "Session",
    "SessionBusy",
    "SessionNotFound",
    "SessionStore",
    "Spawner",
    "StaleLeaseError",
    "Stop",
    "StopSignal",
    "StoreError",
    "StoreNotFound",
    "StoreUnavailable",
    "SubAgent",
    "SubagentFinished",
    "SubagentStarted",
    "TaskDispatcher",
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
    "ToolDefinitionWarning",
    "ToolEffect",
    "ToolError",
    "ToolOutput",
    "ToolProgress",
    "ToolResult",
    "TransportError",
    "Usage",
    "UsageError",
    "WorkFinished",
    "WorkerType",
    "background_tools",
    "console_tools",
    "reply",
    "resolve_model",
    "tool",
]
__version__ = "0.1.0"

# Delegation, background values, stores and the model helpers are part of the
# public surface but import on first use, so `import taskloom` stays as cheap
# as pydantic alone. Type checkers see them through the imports below.
if TYPE_CHECKING:
    from .background import (
        BackgroundActivity,
        BackgroundNotice,
        Delivery,
        Lifecycle,
        Listeners,
        MemoryActivityRegistry,
        MemoryNoticeInbox,
        RunNotices,
        background_tools,
    )
    from .delegation import (
        ChildSpec,
        ChildStatus,
        ChildWorker,
        Dispatcher,
        InlineDispatcher,
        Spawner,
        SubAgent,
        TaskDispatcher,
        WorkerType,
        console_tools,
    )
    from .models import (
        FunctionModel,
        ScriptedModel,
        reply,
        resolve_model,
    )
    from .stores import (
        Entry,
        MemoryStore,
        SessionStore,
    )

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
    "background_tools": "taskloom.background",
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


def _default_background(runtime: Runtime) -> Any:
    # The package root is the one place that knows both the runtime and the
    # background layer: it wires the default service without the runtime
    # importing upward.
    from .background import BackgroundService

    return BackgroundService.for_store(runtime.store, runtime=runtime)


Runtime.default_background = _default_background


def _default_observer(runtime: Runtime) -> Any:
    # Tracing sits above the runtime; deciding whether to trace imports no
    # opentelemetry (see taskloom.tracing._default).
    from .tracing import default_observer

    return default_observer(runtime)


Runtime.default_observer = _default_observer
