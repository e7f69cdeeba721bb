"""What a wire model is: its spec, its base URL, and the body it sends.

`model.spec` round-trips through `resolve_model` to an equivalent model (same
class, name and base URL) for every adapter and preset, and never carries
credentials. A base URL that is not http(s) is a configuration error at
construction, never a transient failure to retry. `build_body` is the body
the model really sends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

import taskloom.models
from taskloom import Agent, RunOptions, Runtime
from taskloom.errors import ConfigurationError, TransportError
from taskloom.messages import Message
from taskloom.models import PRESETS, ModelRequest, RetryPolicy, resolve_model
from taskloom.results import ToolSpec
from taskloom.testing.fake_server import FakeServer

ADAPTERS = {
    "openai": ("OpenAIChatModel", "https://api.openai.com/v1"),
    "openai-responses": ("OpenAIResponsesModel", "https://api.openai.com/v1"),
    "anthropic": ("AnthropicModel", "https://api.anthropic.com"),
    "google": ("GeminiModel", "https://generativelanguage.googleapis.com/v1beta"),
}
SECRET = "pw-not-for-logs"


def adapter_class(prefix: str) -> Any:
    return getattr(taskloom.models, ADAPTERS[prefix][0])


def same_model(a: Any, b: Any) -> bool:
    return (type(a), a.name, a.provider, a.base_url) == (type(b), b.name, b.provider, b.base_url)


@pytest.fixture(autouse=True)
def no_base_url_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PRESETS:
        monkeypatch.delenv(f"{name.upper()}_BASE_URL", raising=False)


# --- specs ---------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", sorted(ADAPTERS))
@pytest.mark.parametrize(
    "base_url", [None, "http://127.0.0.1:8443/proxy/v1", "https://gateway.example.com"]
)
def test_spec_round_trips_with_its_base_url(prefix: str, base_url: str | None) -> None:
    model = adapter_class(prefix)("some-model", api_key="k", base_url=base_url)
    default = ADAPTERS[prefix][1]
    assert model.base_url == (base_url or default)
    expected = f"{prefix}:some-model" + (f"@{base_url}" if base_url else "")
    assert model.spec == expected
    again = resolve_model(model.spec, api_key="k")
    assert same_model(again, model)


def test_a_vertex_spec_names_its_project_and_location_and_round_trips() -> None:
    model = resolve_model(
        "vertex:gemini-2.5-flash", project="proj-1", location="us-central1", token="ya29.tok"
    )
    url = (
        "https://us-central1-aiplatform.googleapis.com/v1beta1/projects/proj-1"
        "/locations/us-central1/publishers/google"
    )
    assert (model.provider, model.base_url) == ("vertex", url)
    assert model.spec == f"vertex:gemini-2.5-flash@{url}"
    again = resolve_model(model.spec, token="ya29.tok")
    assert same_model(again, model)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_specs_round_trip_to_the_same_server(name: str) -> None:
    for spec in (f"{name}:m", f"{name}:m@http://127.0.0.1:9/v1"):
        model = resolve_model(spec, api_key="k")
        assert model.spec == spec
        assert same_model(resolve_model(model.spec, api_key="k"), model)


@pytest.mark.parametrize("prefix", [*sorted(ADAPTERS), "vllm"])
def test_credentials_in_a_base_url_stay_out_of_spec_base_url_and_repr(prefix: str) -> None:
    model = resolve_model(f"{prefix}:m", api_key="k", base_url=f"https://me:{SECRET}@llm.corp/v1")
    for shown in (model.spec, model.base_url, repr(model)):  # type: ignore[attr-defined]
        assert SECRET not in shown and "me:" not in shown
    assert model.spec == f"{prefix}:m@https://llm.corp/v1"
    assert same_model(resolve_model(model.spec, api_key="k"), model)


async def test_credentials_in_a_base_url_are_never_persisted() -> None:
    async with FakeServer() as server:
        url = server.base_url.replace("http://", f"http://me:{SECRET}@")
        model = resolve_model(f"openai:m@{url}")
        async with Runtime() as runtime:
            session = await runtime.create_session(Agent("a", model))
            await session.set_model(model)
            result = await session.run("hi")
            assert result.text
            entries = [repr(entry) for entry in await session.entries()]
    assert entries and not any(SECRET in entry for entry in entries)


# --- base URLs -----------------------------------------------------------------------

BAD_URLS = [
    ("ftp://files.example.com/v1", "ftp"),
    ("127.0.0.1:8000/v1", "no http:// or https://"),
    ("localhost:11434/v1", "no http:// or https://"),
    ("api.example.com/v1", "no http:// or https://"),
    ("http:///v1", "no host"),
    ("http://127.0.0.1:port/v1", "port"),
]


@pytest.mark.parametrize("prefix", sorted(ADAPTERS))
@pytest.mark.parametrize(("url", "problem"), BAD_URLS)
def test_a_bad_base_url_is_a_configuration_error_at_construction(
    prefix: str, url: str, problem: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        adapter_class(prefix)("m", api_key="k", base_url=url)
    message = str(caught.value)
    assert url in message and problem in message
    assert "http://" in message and "https://" in message
    assert not RetryPolicy().should_retry(caught.value, 0)


def test_a_bad_base_url_names_the_url_without_its_credentials() -> None:
    with pytest.raises(ConfigurationError) as caught:
        resolve_model("openai:m", api_key="k", base_url=f"ftp://me:{SECRET}@files.example.com")
    assert SECRET not in str(caught.value) and "ftp://files.example.com" in str(caught.value)


@pytest.mark.parametrize("prefix", [*sorted(ADAPTERS), "ollama"])
def test_a_spec_with_an_unsupported_protocol_is_refused_at_resolve(prefix: str) -> None:
    with pytest.raises(ConfigurationError, match="ftp"):
        resolve_model(f"{prefix}:m@ftp://files.example.com/v1", api_key="k")


def test_a_bad_base_url_from_the_environment_is_refused_at_resolve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OLLAMA_BASE_URL", "localhost:11434/v1")
    with pytest.raises(ConfigurationError, match="localhost:11434/v1"):
        resolve_model("ollama:qwen3")


async def test_a_run_with_a_bad_base_url_fails_at_once_without_retrying() -> None:
    policy = RetryPolicy(max_retries=5, initial_delay=10)
    with pytest.raises(ConfigurationError, match="ftp"):
        await Agent("a", "openai:m@ftp://files.example.com/v1").run(
            "hi", options=RunOptions(retry=policy)
        )


# --- build_body ----------------------------------------------------------------------


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    async with FakeServer() as s:
        yield s


@pytest.mark.parametrize("prefix", sorted(ADAPTERS))
@pytest.mark.parametrize("stream", [True, False])
async def test_build_body_is_the_body_sent(server: FakeServer, prefix: str, stream: bool) -> None:
    base_url = server.anthropic_base_url if prefix == "anthropic" else server.base_url
    if prefix == "google":
        base_url = server.gemini_base_url
    model = adapter_class(prefix)("m", api_key="k", base_url=base_url, stream=stream)
    tool = ToolSpec("clock", "The time.", {"type": "object", "properties": {}})
    request = ModelRequest(messages=[Message.user("hi")], system="Be brief.", tools=[tool])
    await model.request(request)
    assert server.requests[0].body == model.build_body(request)
    if prefix == "google":
        # Gemini streams from an endpoint of its own; the body is the same.
        assert model.build_body(request, stream=not stream) == model.build_body(request)
        assert server.requests[0].path.endswith(model.url.rpartition("/")[2])
    else:
        assert model.build_body(request, stream=not stream) != model.build_body(request)


async def test_a_redirect_to_an_unsupported_protocol_is_not_retried() -> None:
    async with FakeServer() as server, httpx2.AsyncClient(follow_redirects=True) as client:
        server.script(FakeServer.error(307, headers={"location": "ftp://files.example.com/v1"}))
        model = resolve_model(f"openai:m@{server.base_url}", http_client=client)
        with pytest.raises(TransportError, match="ftp") as caught:
            await model.request(ModelRequest(messages=[Message.user("hi")]))
    assert not caught.value.retryable
    assert not RetryPolicy().should_retry(caught.value, 0)


def test_a_misspelt_option_is_refused() -> None:
    for prefix in ADAPTERS:
        with pytest.raises(TypeError, match="bse_url"):
            adapter_class(prefix)("m", api_key="k", bse_url="http://127.0.0.1:9/v1")
