"""resolve / resolve_model: spec strings to models, presets, keys and base URLs."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import taskloom.models
from fresh_process import run_fresh
from taskloom.errors import ConfigurationError, ProviderError
from taskloom.messages import Message
from taskloom.models import PRESETS, ModelRequest, OpenAIChatModel, resolve_model
from taskloom.testing.transport import RecordingTransport, SentRequest

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
    model = resolve_model(spec, http_client=server.client(), **options)
    await model.request(ModelRequest(messages=[Message.user("hi")]))
    return server.requests[0]


def chat(spec: str, **options: Any) -> OpenAIChatModel:
    model = resolve_model(spec, **options)
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
        resolve_model("openai:gpt-4o")


async def test_openai_at_a_base_url_needs_no_key_and_never_sends_the_openai_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = resolve_model("openai:my-model@http://127.0.0.1:8000/v1/")
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


def test_the_presets_table_is_the_one_checked_here() -> None:
    assert list(PRESETS) == ["openai", *PRESET_DEFAULTS]  # `openai` first, as resolve reads it


@pytest.mark.parametrize("name", sorted(PRESET_DEFAULTS))
def test_presets_reach_their_default_servers(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    base_url, key_env, required = PRESET_DEFAULTS[name]
    if required:
        assert key_env is not None
        with pytest.raises(ConfigurationError, match=key_env):
            resolve_model(f"{name}:some-model")
        monkeypatch.setenv(key_env, "sk-preset")
    model = resolve_model(f"{name}:some-model")
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
    model = resolve_model("ollama:qwen3:8b")
    assert (model.name, model.provider) == ("qwen3:8b", "ollama")
    at = chat("vllm:org/model@v2@http://127.0.0.1:9/v1")
    assert (at.provider, at.name, at.base_url) == ("vllm", "org/model@v2", "http://127.0.0.1:9/v1")
    plain = chat("openai:gpt-4o", api_key="k")
    assert (plain.provider, plain.name, plain.base_url) == (
        "openai",
        "gpt-4o",
        "https://api.openai.com/v1",
    )


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
        resolve_model(spec)
    message = str(info.value)
    if spec in ("openai:", "openai:@http://127.0.0.1/v1"):
        assert "names no model" in message
    else:
        for prefix in ("openai", "openai-responses", "anthropic", "google", "vertex", *PRESETS):
            assert prefix in message


KEY_HEADERS = {
    "openai-responses": ("authorization", "Bearer k"),
    "anthropic": ("x-api-key", "k"),
    "google": ("x-goog-api-key", "k"),
}


@pytest.mark.parametrize(
    ("prefix", "class_name"),
    [
        ("openai-responses", "OpenAIResponsesModel"),
        ("anthropic", "AnthropicModel"),
        ("google", "GeminiModel"),
    ],
)
async def test_other_wire_apis_get_the_model_the_server_and_the_options(
    prefix: str, class_name: str
) -> None:
    server = RecordingTransport(default=RecordingTransport.json({"error": "no"}, status=400))
    model = resolve_model(
        f"{prefix}:the-model@http://127.0.0.1:9/v1", api_key="k", http_client=server.client()
    )
    assert type(model) is getattr(taskloom.models, class_name)
    assert (model.name, model.base_url) == ("the-model", "http://127.0.0.1:9/v1")
    with pytest.raises(ProviderError):
        await model.request(ModelRequest(messages=[Message.user("hi")]))
    (request,) = server.requests
    header, value = KEY_HEADERS[prefix]
    assert (
        str(request.url).startswith("http://127.0.0.1:9/v1/") and request.headers[header] == value
    )
    assert "the-model" in str(request.url) + request.content.decode()
    home = resolve_model(f"{prefix}:the-model", api_key="k")
    assert type(home) is type(model) and home.base_url != model.base_url


def test_a_spec_loads_only_its_own_wire_api() -> None:
    code = (
        "import sys\n"
        "from taskloom.models import resolve_model\n"
        "resolve_model('openai:m@http://127.0.0.1:9/v1')\n"
        "print(sorted(n for n in sys.modules for api in ('anthropic', 'gemini', 'responses')"
        " if api in n))\n"
    )
    assert run_fresh(code).strip() == "[]"


async def test_vertex_is_gemini_on_vertex_ai_with_its_own_options() -> None:
    model = resolve_model("vertex:gemini-2.5-flash", project="p", token="t")
    assert type(model) is taskloom.models.GeminiModel
    assert (model.name, model.provider) == ("gemini-2.5-flash", "vertex")
    assert model.base_url == (
        "https://aiplatform.googleapis.com/v1beta1/projects/p/locations/global/publishers/google"
    )
    server = RecordingTransport(default=RecordingTransport.json({"error": "no"}, status=400))
    at = resolve_model(
        "vertex:g@https://proxy.example/v1beta1", token="t", http_client=server.client()
    )
    assert (at.name, at.provider, at.base_url) == ("g", "vertex", "https://proxy.example/v1beta1")
    with pytest.raises(ProviderError):
        await at.request(ModelRequest(messages=[Message.user("hi")]))
    (request,) = server.requests
    assert str(request.url).startswith("https://proxy.example/v1beta1/models/g:")
    assert request.headers["authorization"] == "Bearer t"


def test_resolve_model_passes_models_through() -> None:
    model = resolve_model("lmstudio:m")
    assert resolve_model(model) is model
