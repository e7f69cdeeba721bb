"""Turning `"provider:model"` strings into models.

`resolve("openai:gpt-4.1-mini")` is Chat Completions, `openai-responses:` the
Responses API, `anthropic:` the Messages API, and every name in `PRESETS` an
OpenAI-compatible server reached through Chat Completions. A `@<base_url>`
suffix (`"openai:my-model@http://127.0.0.1:8000/v1"`) points any of them at
another server. Adapters are imported only when a spec asks for them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from .base import Model

__all__ = ["PREFIXES", "PRESETS", "Preset", "resolve", "split_spec"]


@dataclass(frozen=True, slots=True)
class Preset:
    """A server spoken to through Chat Completions.

    `base_url` is the default, overridden by the environment variable
    `base_url_env` and then by `base_url=`. `api_key_env` names the key's
    variable; when `key_required` is false a missing key means no
    `Authorization` header (local servers).
    """

    name: str
    base_url: str
    api_key_env: str | None
    key_required: bool

    @property
    def base_url_env(self) -> str:
        """The environment variable that overrides `base_url` (`<NAME>_BASE_URL`)."""
        return f"{self.name.upper()}_BASE_URL"


def _table(*presets: Preset) -> Mapping[str, Preset]:
    return MappingProxyType({p.name: p for p in presets})


PRESETS: Mapping[str, Preset] = _table(
    Preset("openai", "https://api.openai.com/v1", "OPENAI_API_KEY", True),
    Preset("ollama", "http://localhost:11434/v1", "OLLAMA_API_KEY", False),
    Preset("vllm", "http://localhost:8000/v1", "VLLM_API_KEY", False),
    Preset("lmstudio", "http://localhost:1234/v1", None, False),
    Preset("llamacpp", "http://localhost:8080/v1", None, False),
    Preset("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", True),
    Preset("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY", True),
    Preset("together", "https://api.together.xyz/v1", "TOGETHER_API_KEY", True),
    Preset("deepseek", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY", True),
)
"""Chat Completions servers by spec prefix (`openai` first); docs list this table."""

_OTHER_APIS = {
    "openai-responses": ("taskloom.models.openai_responses", "OpenAIResponsesModel"),
    "anthropic": ("taskloom.models.anthropic", "AnthropicModel"),
}

PREFIXES: tuple[str, ...] = ("openai", "openai-responses", "anthropic", *list(PRESETS)[1:])
"""Every prefix `resolve` understands."""


def split_spec(spec: str) -> tuple[str, str, str | None]:
    """`(prefix, model, base_url)` of a spec; base_url is None without `@<url>`.

    The server part starts at the first `@http://` or `@https://`, so model
    names may contain `@` and `:` (`ollama:qwen3:8b`).
    """
    prefix, sep, rest = spec.partition(":")
    if not sep or not prefix:
        raise ConfigurationError(
            f"model spec {spec!r} has no provider prefix: write '<provider>:<model>' "
            f"with a provider among {', '.join(PREFIXES)}"
        )
    base_url: str | None = None
    cuts = [i for i in (rest.find("@http://"), rest.find("@https://")) if i >= 0]
    if cuts:
        cut = min(cuts)
        rest, base_url = rest[:cut], rest[cut + 1 :].rstrip("/")
    if not rest:
        raise ConfigurationError(f"model spec {spec!r} names no model after {prefix + ':'!r}")
    return prefix, rest, base_url


def resolve(spec: str, **options: Any) -> Model:
    """The model a spec names, built with `options` (`api_key=`, `base_url=`, ...).

    A Chat Completions server's URL is `base_url=`, else the spec's
    `@<base_url>`, else `$<NAME>_BASE_URL`, else the `PRESETS` default. Its key
    is required only where `PRESETS` says so; a spec with `@<base_url>` reads
    no key variable unless `api_key_env=` names one, so a key meant for one
    server is never sent to another. Unknown prefixes raise
    `ConfigurationError` listing the known ones.
    """
    prefix, model_name, at_url = split_spec(spec)
    other = _OTHER_APIS.get(prefix)
    if other is not None:
        if at_url is not None:
            options.setdefault("base_url", at_url)
        import importlib

        module_name, class_name = other
        cls = getattr(importlib.import_module(module_name), class_name)
        model: Model = cls(model_name, **options)
        return model
    preset = PRESETS.get(prefix)
    if preset is None:
        raise ConfigurationError(
            f"unknown model provider {prefix!r} in {spec!r}: known providers are "
            + ", ".join(PREFIXES)
        )
    return _chat_model(preset, model_name, at_url, options)


def _chat_model(
    preset: Preset, model_name: str, at_url: str | None, options: dict[str, Any]
) -> Model:
    from .openai_chat import OpenAIChatModel

    base_url = options.pop("base_url", None) or at_url
    if base_url is None:
        base_url = os.environ.get(preset.base_url_env) or preset.base_url
    # A spec that names its own server reads no key variable unless asked
    # to: the preset's key belongs to the preset's server.
    key_env = options.pop("api_key_env", preset.api_key_env if at_url is None else None)
    api_key = options.pop("api_key", None)
    required = preset.key_required and at_url is None
    if api_key is None and key_env is not None and not required:
        api_key = os.environ.get(key_env) or None
    options.setdefault("provider", preset.name)
    return OpenAIChatModel(
        model_name,
        api_key=api_key,
        api_key_env=key_env if required else None,
        base_url=base_url,
        **options,
    )
