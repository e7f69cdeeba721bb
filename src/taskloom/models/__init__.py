"""Models: the provider seam, scripted models, wire adapters and their resolver.

The wire adapters, the scripted, recording and replay models import lazily, so
`import taskloom` never pays for them. `PRESETS` is the resolver's read-only
table of OpenAI-compatible servers (`Preset`, each with its `ChatQuirks`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._base import (
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ReasoningOptions,
    ResponseCompleted,
    RetryPolicy,
    StreamEvent,
    ToolCallDelta,
)
from ._resolve import PRESETS, resolve_model
from ._wire import known_context_window

if TYPE_CHECKING:
    from ._anthropic import AnthropicModel
    from ._gemini import GeminiModel
    from ._openai_chat import OpenAIChatModel
    from ._openai_responses import OpenAIResponsesModel
    from ._replay import RecordingModel, ReplayModel
    from ._scripted import FunctionModel, Reply, ScriptedModel, reply

__all__ = [
    "PRESETS",
    "AnthropicModel",
    "FunctionModel",
    "GeminiModel",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "ReasoningOptions",
    "Reply",
    "ResponseCompleted",
    "RecordingModel",
    "ReplayModel",
    "RetryPolicy",
    "ScriptedModel",
    "StreamEvent",
    "ToolCallDelta",
    "known_context_window",
    "reply",
    "resolve_model",
]

_LAZY = {
    "OpenAIChatModel": "._openai_chat",
    "OpenAIResponsesModel": "._openai_responses",
    "AnthropicModel": "._anthropic",
    "GeminiModel": "._gemini",
    "RecordingModel": "._replay",
    "ReplayModel": "._replay",
    "ScriptedModel": "._scripted",
    "FunctionModel": "._scripted",
    "Reply": "._scripted",
    "reply": "._scripted",
}


__getattr__ = lazy_exports(__name__, _LAZY)
