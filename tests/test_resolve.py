"""resolve / resolve_model: spec strings to models, presets, keys and base URLs."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import httpx2
import pytest

from taskloom.errors import ConfigurationError
from taskloom.messages import Message
from taskloom.models import ModelRequest, OpenAIChatModel, resolve_model
from taskloom.models._resolve import PREFIXES, PRESETS, resolve, split_spec
from taskloom.testing import RecordingTransport
from taskloom.testing.transport import SentRequest

PRESET_DEFAULTS = {
    "ollama": ("http://localhost:11434/v1", "OLLAMA_API_KEY", False),
    "vllm": ("http://localhost:8000/v1", "VLLM_API_KEY", False),
    "lmstudio": ("http://localhost:1234/v1", None, False),
    "llamacpp": ("http://localhost:8080/v1", None, False),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", True),
    "groq": ("https://api.groq.com/openai/v1", "GROQ_API_KEY", True),
    "together": ("https://api.together.xyz/v1", "TOGETHER_API_KEY", True),
    "deepseek": ("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY", True),
}

KEY_VARIABLES = ["OPENAI_API_KEY", *(env for _, env, _ in PRESET_DEFAULTS.values() if env)]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in KEY_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    for name in PRESETS:
        monkeypatch.delenv(f"{name.upper()}_BASE_URL", raising=False)


async def sent(spec: str, **options: Any) -> SentRequest:
    """What the model a spec resolves to sends for one request (through a mock server)."""
    chunk = {"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]}
    streamed = RecordingTransport.sse(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n")
    whole = RecordingTransport.json(
        {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}
    )

    def answer(request: httpx2.Request) -> httpx2.Response:
        asked_to_stream = json.loads(request.content).get("stream")
        return (streamed if asked_to_stream else whole).to_response(request)

    server = RecordingTransport(answer)
    options.setdefault("stream", False)
    model = resolve(spec, http_client=server.client(), **options)
    await model.request(ModelRequest(messages=[Message.user("hi")]))
    return server.requests[0]


def chat(spec: str, **options: Any) -> OpenAIChatModel:
    model = resolve(spec, **options)
    assert isinstance(model, OpenAIChatModel)
    return model


def test_openai_is_chat_completions_with_the_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    model = resolve_model("openai:gpt-4.1-mini")
    assert isinstance(model, OpenAIChatModel)
    assert (model.provider, model.name, model.base_url, model.spec) == (
        "openai",
        "gpt-4.1-mini",
        "https://api.openai.com/v1",
        "openai:gpt-4.1-mini",
    )


def test_openai_without_a_key_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        resolve("openai:gpt-4o")


async def test_openai_at_a_base_url_needs_no_key_and_never_sends_the_openai_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = resolve("openai:my-model@http://127.0.0.1:8000/v1/")
    assert isinstance(model, OpenAIChatModel)
    assert (model.name, model.base_url, model.provider) == (
        "my-model",
        "http://127.0.0.1:8000/v1",
        "openai",
    )
    assert model.spec == "openai:my-model@http://127.0.0.1:8000/v1"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-for-openai-only")
    request = await sent("openai:m@http://127.0.0.1:8000/v1")
    assert str(request.url) == "http://127.0.0.1:8000/v1/chat/completions"
    assert "authorization" not in request.headers
    given = await sent("openai:m@http://127.0.0.1:8000/v1", api_key="sk-local")
    assert given.headers["authorization"] == "Bearer sk-local"
    monkeypatch.setenv("LOCAL_KEY", "sk-named")
    named = await sent("openai:m@http://127.0.0.1:8000/v1", api_key_env="LOCAL_KEY")
    assert named.headers["authorization"] == "Bearer sk-named"


@pytest.mark.parametrize("name", sorted(PRESET_DEFAULTS))
def test_presets_reach_their_default_servers(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    base_url, key_env, required = PRESET_DEFAULTS[name]
    if required:
        assert key_env is not None
        with pytest.raises(ConfigurationError, match=key_env):
            resolve(f"{name}:some-model")
        monkeypatch.setenv(key_env, "sk-preset")
    model = resolve(f"{name}:some-model")
    assert isinstance(model, OpenAIChatModel)
    assert (model.provider, model.name, model.base_url) == (name, "some-model", base_url)
    assert model.spec == f"{name}:some-model"
    preset = PRESETS[name]
    assert (preset.base_url, preset.api_key_env, preset.key_required) == (
        base_url,
        key_env,
        required,
    )


@pytest.mark.parametrize("name", sorted(PRESET_DEFAULTS))
def test_preset_base_url_from_environment_then_option(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, key_env, _ = PRESET_DEFAULTS[name]
    if key_env:
        monkeypatch.setenv(key_env, "sk-preset")
    monkeypatch.setenv(f"{name.upper()}_BASE_URL", "http://127.0.0.1:7001/v1")
    from_env = chat(f"{name}:m")
    assert from_env.base_url == "http://127.0.0.1:7001/v1"
    assert (
        chat(f"{name}:m", base_url="http://127.0.0.1:7002/v1").base_url
        == "http://127.0.0.1:7002/v1"
    )
    assert chat(from_env.spec).base_url == "http://127.0.0.1:7001/v1"


async def test_optional_keys_are_sent_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "authorization" not in (await sent("ollama:qwen3")).headers
    monkeypatch.setenv("OLLAMA_API_KEY", "ollama-cloud-key")
    assert (await sent("ollama:qwen3")).headers["authorization"] == "Bearer ollama-cloud-key"
    monkeypatch.setenv("GROQ_API_KEY", "gsk-1")
    groq = await sent("groq:llama-3.3-70b")
    assert groq.headers["authorization"] == "Bearer gsk-1"
    assert str(groq.url) == "https://api.groq.com/openai/v1/chat/completions"


def test_model_names_may_contain_colons_and_at_signs() -> None:
    model = resolve("ollama:qwen3:8b")
    assert (model.name, model.provider) == ("qwen3:8b", "ollama")
    assert split_spec("vllm:org/model@v2@http://127.0.0.1:9/v1") == (
        "vllm",
        "org/model@v2",
        "http://127.0.0.1:9/v1",
    )
    assert split_spec("openai:gpt-4o") == ("openai", "gpt-4o", None)


@pytest.mark.parametrize(
    "spec",
    [
        "ollama:qwen3",
        "ollama:qwen3@http://127.0.0.1:11500/v1",
        "openai:local-model@http://127.0.0.1:8000/v1",
        "llamacpp:any@https://127.0.0.1:8443/v1",
        "vllm:Qwen/Qwen3-8B",
    ],
)
def test_spec_round_trips(spec: str) -> None:
    model = chat(spec)
    assert model.spec == spec
    again = chat(model.spec)
    assert (again.name, again.provider, again.base_url) == (
        model.name,
        model.provider,
        model.base_url,
    )


async def test_options_reach_the_adapter() -> None:
    streamed = await sent("lmstudio:m", stream=True, headers={"X-A": "1"})
    assert streamed.headers["x-a"] == "1"
    assert json.loads(streamed.content)["stream"] is True
    plain = await sent("lmstudio:m", stream=False)
    assert "stream" not in json.loads(plain.content)


@pytest.mark.parametrize(
    "spec", ["gpt-4o", "mistral:large", ":gpt-4o", "openai:", "openai:@http://127.0.0.1/v1"]
)
def test_bad_specs_list_the_known_prefixes_or_name_the_problem(spec: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve(spec)
    message = str(info.value)
    if spec in ("openai:", "openai:@http://127.0.0.1/v1"):
        assert "names no model" in message
    else:
        for prefix in ("openai", "openai-responses", "anthropic", "google", "vertex", "deepseek"):
            assert prefix in message
    assert set(PREFIXES) >= {"openai", "openai-responses", "anthropic", *PRESET_DEFAULTS}


@pytest.mark.parametrize(
    ("prefix", "module_name", "class_name"),
    [
        ("openai-responses", "taskloom.models._openai_responses", "OpenAIResponsesModel"),
        ("anthropic", "taskloom.models._anthropic", "AnthropicModel"),
        ("google", "taskloom.models._gemini", "GeminiModel"),
    ],
)
def test_other_wire_apis_are_imported_lazily_and_get_the_options(
    prefix: str, module_name: str, class_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[tuple[str, dict[str, Any]]] = []

    class Fake:
        def __init__(self, model_name: str, **options: Any) -> None:
            made.append((model_name, options))

    module = types.ModuleType(module_name)
    setattr(module, class_name, Fake)
    monkeypatch.setitem(sys.modules, module_name, module)
    model = resolve(f"{prefix}:the-model", api_key="k")
    assert isinstance(model, Fake)
    at = resolve(f"{prefix}:other@http://127.0.0.1:9/v1")
    assert isinstance(at, Fake)
    assert made == [
        ("the-model", {"api_key": "k"}),
        ("other", {"base_url": "http://127.0.0.1:9/v1"}),
    ]


def test_vertex_is_gemini_on_vertex_ai_with_its_own_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[tuple[str, dict[str, Any]]] = []

    class Fake:
        @classmethod
        def vertex(cls, model_name: str, **options: Any) -> Fake:
            made.append((model_name, options))
            return cls()

    module = types.ModuleType("taskloom.models._gemini")
    module.GeminiModel = Fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "taskloom.models._gemini", module)
    assert isinstance(resolve("vertex:gemini-2.5-flash", project="p", token="t"), Fake)
    assert isinstance(resolve("vertex:g@https://proxy.example/v1beta1", token="t"), Fake)
    assert made == [
        ("gemini-2.5-flash", {"project": "p", "token": "t"}),
        ("g", {"token": "t", "base_url": "https://proxy.example/v1beta1"}),
    ]


def test_resolve_model_passes_models_through() -> None:
    model = resolve("lmstudio:m")
    assert resolve_model(model) is model
