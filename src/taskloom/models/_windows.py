"""Context windows of well-known models, in tokens (input and output together).

From the providers' model documentation; a model not listed here has no
known window unless `ModelSettings(context_window=...)` gives one. Longest
prefix wins, so a dated snapshot (`gpt-4.1-mini-2025-04-14`) finds its family.
"""

from __future__ import annotations

__all__ = ["KNOWN_CONTEXT_WINDOWS", "known_context_window"]

KNOWN_CONTEXT_WINDOWS: dict[str, int] = {
    # OpenAI
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    # Anthropic
    "claude-": 200_000,
    # Google (the input limit; Gemini counts its output apart)
    "gemini-": 1_048_576,
    "gemini-1.5-pro": 2_097_152,
    # Common open models as OpenAI-compatible servers name them
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "llama3.3": 131_072,
    "qwen3": 40_960,
    "qwen2.5": 32_768,
    "mistral": 32_768,
    "gemma3": 131_072,
    "deepseek-chat": 65_536,
    "deepseek-reasoner": 65_536,
}


def known_context_window(model_name: str) -> int | None:
    """The context window of a well-known model by name (or its family), else None."""
    name = model_name.lower().rsplit("/", 1)[-1]
    best: str | None = None
    for prefix in KNOWN_CONTEXT_WINDOWS:
        if name.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return None if best is None else KNOWN_CONTEXT_WINDOWS[best]
