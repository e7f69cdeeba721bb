"""Turning `"provider:model"` strings into models (`resolve_model`), and every
provider's default server and key variables (`PRESETS`, `ANTHROPIC`,
`OPENAI_RESPONSES`, `GOOGLE`, `VERTEX`): a key read from a provider's variable
goes only to that provider's own server. Adapters are imported only when a
spec asks for them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ._base import Model


@dataclass(frozen=True, slots=True)
class ChatQuirks:
    """What a Chat Completions server family accepts where OpenAI's own host differs.

    `max_tokens_field` names the output limit (`max_tokens`; OpenAI's host
    wants `max_completion_tokens`, its reasoning models refuse the old name).
    `tool_turn_content` is the `content` of an assistant turn with only tool
    calls: None leaves the key out, as OpenAI's host allows; chat templates
    that read `message.content` (llama.cpp) need `""`.
    """

    max_tokens_field: str = "max_tokens"
    tool_turn_content: str | None = ""


COMPATIBLE = ChatQuirks()
"""The quirks of any compatible server: what OpenAI's host and the others all accept."""

OPENAI_HOST = ChatQuirks(max_tokens_field="max_completion_tokens", tool_turn_content=None)
"""OpenAI's own host (`api.openai.com`), as its API reference documents it."""


@dataclass(frozen=True, slots=True)
class Preset:
    """A provider's own server and key: the defaults a spec prefix stands for.

    `api_key_env` names the key's variable, whose value is sent to `base_url`'s
    host and no other; `more_key_envs` are read after it when it is unset.
    Without `key_required` a missing key means no auth header (local servers).
    For Chat Completions prefixes the environment variable `base_url_env`,
    then `base_url=`, override the server. `quirks`: see `ChatQuirks`.
    """

    name: str
    base_url: str
    api_key_env: str | None
    key_required: bool
    quirks: ChatQuirks = COMPATIBLE
    more_key_envs: tuple[str, ...] = ()

    @property
    def key_envs(self) -> tuple[str, ...]:
        """Every variable the key is read from, in the order they are tried."""
        first = () if self.api_key_env is None else (self.api_key_env,)
        return (*first, *self.more_key_envs)

    @property
    def base_url_env(self) -> str:
        """The environment variable that overrides `base_url` (`<NAME>_BASE_URL`)."""
        return f"{self.name.upper()}_BASE_URL"


def _table(*presets: Preset) -> Mapping[str, Preset]:
    return MappingProxyType({p.name: p for p in presets})


PRESETS: Mapping[str, Preset] = _table(
    Preset("openai", "https://api.openai.com/v1", "OPENAI_API_KEY", True, OPENAI_HOST),
    Preset("ollama", "http://localhost:11434/v1", "OLLAMA_API_KEY", False),
    Preset("vllm", "http://localhost:8000/v1", "VLLM_API_KEY", False),
    Preset("lmstudio", "http://localhost:1234/v1", None, False),
    Preset("llamacpp", "http://localhost:8080/v1", None, False),
    Preset("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", True),
    Preset("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY", True),
    Preset("together", "https://api.together.xyz/v1", "TOGETHER_API_KEY", True),
    Preset("deepseek", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY", True),
)
"""Chat Completions servers by spec prefix (`openai` first), read-only; docs list this table."""

ANTHROPIC = Preset("anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY", True)
"""The Anthropic Messages API's server and key."""

OPENAI_RESPONSES = Preset("openai-responses", "https://api.openai.com/v1", "OPENAI_API_KEY", True)
"""The OpenAI Responses API's server and key."""

GOOGLE = Preset(
    "google",
    "https://generativelanguage.googleapis.com/v1beta",
    "GOOGLE_API_KEY",
    True,
    more_key_envs=("GEMINI_API_KEY",),
)
"""The Gemini API's server and keys: `GOOGLE_API_KEY`, else `GEMINI_API_KEY` (the
order Google's own SDK reads them in)."""

VERTEX = Preset("vertex", "https://aiplatform.googleapis.com/v1beta1", None, False)
"""Gemini on Vertex AI: no key variable (the access token is the caller's to
give); the server's path names the project and location (`GeminiModel.vertex`)."""

_OTHER_APIS = {
    "openai-responses": ("taskloom.models._openai_responses", "OpenAIResponsesModel"),
    "anthropic": ("taskloom.models._anthropic", "AnthropicModel"),
    "google": ("taskloom.models._gemini", "GeminiModel"),
    "vertex": ("taskloom.models._gemini", "GeminiModel.vertex"),
}

PREFIXES: tuple[str, ...] = ("openai", *_OTHER_APIS, *list(PRESETS)[1:])
"""Every prefix `resolve_model` understands."""


_AT_URL = re.compile(r"@[A-Za-z][A-Za-z0-9+.-]*://")


def split_spec(spec: str) -> tuple[str, str, str | None]:
    """`(prefix, model, base_url)` of a spec (the prefix lower-cased; base_url None
    without `@<url>`). The server part starts at the first `@<scheme>://` (any
    scheme, for the adapter to refuse by name), so model names may hold `@`
    and `:` (`ollama:qwen3:8b`)."""
    prefix, sep, rest = spec.partition(":")
    # Provider names are names, not identifiers: `OpenAI:` is `openai:`.
    prefix = prefix.strip().lower()
    if not sep or not prefix:
        raise ConfigurationError(
            f"model spec {spec!r} has no provider prefix: write '<provider>:<model>' "
            f"with a provider among {', '.join(PREFIXES)}"
        )
    base_url: str | None = None
    server = _AT_URL.search(rest)
    if server is not None:
        rest, base_url = rest[: server.start()], rest[server.start() + 1 :].rstrip("/")
    if not rest:
        raise ConfigurationError(f"model spec {spec!r} names no model after {prefix + ':'!r}")
    return prefix, rest, base_url


def resolve_model(spec: str | Model, **options: Any) -> Model:
    """Turn `"provider:model"` into a model (a `Model` passes through unchanged).

    `openai:` is Chat Completions, `openai-responses:` the Responses API,
    `anthropic:` the Messages API, `google:` Gemini on the Gemini API and
    `vertex:` Gemini on Vertex AI (see `GeminiModel.vertex`); the `PRESETS`
    (`ollama:`, `vllm:`, ...) and `openai:<model>@<base_url>` reach other
    servers. Keyword options go to the adapter (`api_key=`, `base_url=`, ...).
    A key from the environment goes only to its provider's own host. A Chat
    Completions server's URL is `base_url=`, else the spec's `@<base_url>`,
    else `$<NAME>_BASE_URL`, else the preset's. `model.spec` turns back into
    an equivalent model and never carries a key or a base URL's user-info.
    """
    if not isinstance(spec, str):
        return spec
    prefix, model_name, at_url = split_spec(spec)
    other = _OTHER_APIS.get(prefix)
    if other is not None:
        if at_url is not None:
            options.setdefault("base_url", at_url)
        import importlib

        module_name, factory_name = other
        factory: Any = importlib.import_module(module_name)
        for attribute in factory_name.split("."):
            factory = getattr(factory, attribute)
        model: Model = factory(model_name, **options)
        return model
    preset = PRESETS.get(prefix)
    if preset is None:
        raise ConfigurationError(
            f"unknown model provider {prefix!r} in {spec!r}: known providers are "
            + ", ".join(PREFIXES)
        )
    from ._openai_chat import OpenAIChatModel

    if options.get("base_url") is None:
        options["base_url"] = at_url or os.environ.get(preset.base_url_env) or preset.base_url
    options.setdefault("provider", preset.name)
    return OpenAIChatModel(model_name, **options)
