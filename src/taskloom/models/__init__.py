"""Models: the provider seam, scripted models, wire adapters and their resolver.

Wire adapters import lazily (`OpenAIChatModel`, `OpenAIResponsesModel`,
`AnthropicModel`, `GeminiModel`), and so do the recording and replay models,
so `import taskloom` never pays for them. `PRESETS` is the resolver's table of
OpenAI-compatible servers (`Preset`, each with its `ChatQuirks`), read-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_exports
from ._base import (
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ReasoningOptions,
    ResponseCompleted,
    StreamEvent,
    ToolCallDelta,
)
from ._retry import RetryPolicy
from ._scripted import FunctionModel, Reply, ScriptedModel, reply
from ._windows import known_context_window

if TYPE_CHECKING:
    from ._anthropic import AnthropicModel
    from ._gemini import GeminiModel
    from ._openai_chat import OpenAIChatModel
    from ._openai_responses import OpenAIResponsesModel
    from ._replay import RecordingModel, ReplayModel
    from ._resolve import PRESETS

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
    "PRESETS": "._resolve",
}


__getattr__ = lazy_exports(__name__, _LAZY)


def resolve_model(spec: str | Model, **options: Any) -> Model:
    """Turn `"provider:model"` into a model (a `Model` passes through unchanged).

    `openai:` is Chat Completions, `openai-responses:` the Responses API,
    `anthropic:` the Messages API, `google:` Gemini on the Gemini API and
    `vertex:` Gemini on Vertex AI (`project=`, `location=`, `token=`; see
    `GeminiModel.vertex`); OpenAI-compatible presets (`ollama:`,
    `vllm:`, `lmstudio:`, `llamacpp:`, `openrouter:`, `groq:`, `together:`,
    `deepseek:`) and `openai:<model>@<base_url>` reach any other server.
    Keyword options go to the adapter (`api_key=`, `base_url=`, ...). A key
    from the environment goes only to its provider's own host; `api_key=`
    goes wherever the model points. `model.spec` turns back into an
    equivalent model and never carries a key or a base URL's user-info.
    """
    if not isinstance(spec, str):
        return spec
    from ._resolve import resolve

    return resolve(spec, **options)
