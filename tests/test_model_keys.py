"""API keys go only where they belong.

A key from the environment goes only to its provider's own host; a key passed
as `api_key=` goes wherever the model points. Proven against a loopback server
that records the headers of every request, for the four wire adapters and
every preset. A key the provider echoes back in an error never reaches the
error's text, the log or the logs.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

import taskloom.models
from taskloom import Agent, RunOptions, RunStatus, Runtime
from taskloom.backends import SQLiteBackend
from taskloom.entries import RunFinishedEntry
from taskloom.errors import AuthenticationError, ConfigurationError
from taskloom.events import Event, RetryAttempt
from taskloom.messages import Message
from taskloom.models import PRESETS, ModelRequest, RetryPolicy, resolve_model
from taskloom.testing.fake_server import FakeServer

ENV_KEYS = {
    "OPENAI_API_KEY": "sk-openai-env",
    "ANTHROPIC_API_KEY": "sk-ant-env",
    "GOOGLE_API_KEY": "sk-google-env",
    "GEMINI_API_KEY": "sk-gemini-env",
    **{p.api_key_env: f"sk-{p.name}-env" for p in PRESETS.values() if p.api_key_env},
}
AUTH_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")
ADAPTERS = {
    "openai": "OpenAIChatModel",
    "openai-responses": "OpenAIResponsesModel",
    "anthropic": "AnthropicModel",
    "google": "GeminiModel",
}
PREFIXES = ["openai-responses", "anthropic", "google", *PRESETS]
HOME_VARIABLE = {"anthropic": "ANTHROPIC_API_KEY", "google": "GOOGLE_API_KEY"}


@pytest.fixture(autouse=True)
def keys_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable, value in ENV_KEYS.items():
        monkeypatch.setenv(variable, value)
    for name in PRESETS:
        monkeypatch.delenv(f"{name.upper()}_BASE_URL", raising=False)


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    async with FakeServer() as s:
        yield s


def loopback(prefix: str, server: FakeServer) -> str:
    if prefix == "google":
        return server.gemini_base_url
    return server.anthropic_base_url if prefix == "anthropic" else server.base_url


async def ask(model: Any) -> None:
    await model.request(ModelRequest(messages=[Message.user("hi")]))


def auth_of(server: FakeServer) -> dict[str, str]:
    (sent,) = server.requests
    return {k: v for k, v in sent.headers.items() if k in AUTH_HEADERS}


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("stream", [True, False])
async def test_a_spec_pointing_elsewhere_never_carries_an_environment_key(
    server: FakeServer, prefix: str, stream: bool
) -> None:
    model = resolve_model(f"{prefix}:m@{loopback(prefix, server)}", stream=stream)
    await ask(model)
    assert auth_of(server) == {}


@pytest.mark.parametrize("prefix", PREFIXES)
async def test_base_url_option_never_carries_an_environment_key(
    server: FakeServer, prefix: str
) -> None:
    # The command line's --base-url takes this path.
    await ask(resolve_model(f"{prefix}:m", base_url=loopback(prefix, server)))
    assert auth_of(server) == {}


@pytest.mark.parametrize("name", sorted(PRESETS))
async def test_base_url_from_the_environment_gets_no_environment_key(
    server: FakeServer, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"{name.upper()}_BASE_URL", server.base_url)
    await ask(resolve_model(f"{name}:m"))
    assert auth_of(server) == {}


@pytest.mark.parametrize("prefix", sorted(ADAPTERS))
async def test_adapters_built_directly_send_no_environment_key_elsewhere(
    server: FakeServer, prefix: str
) -> None:
    cls = getattr(taskloom.models, ADAPTERS[prefix])
    await ask(cls("m", base_url=loopback(prefix, server)))
    assert auth_of(server) == {}


@pytest.mark.parametrize("prefix", PREFIXES)
async def test_an_explicit_key_goes_where_the_user_points_it(
    server: FakeServer, prefix: str
) -> None:
    await ask(resolve_model(f"{prefix}:m@{loopback(prefix, server)}", api_key="sk-given"))
    expected = {"authorization": "Bearer sk-given"}
    if prefix in ("anthropic", "google"):
        expected = {"x-api-key" if prefix == "anthropic" else "x-goog-api-key": "sk-given"}
    assert auth_of(server) == expected


async def home_headers(spec: str, **options: Any) -> httpx2.Headers:
    """The headers a model sends to its default host (a mock transport stands in for it)."""
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(500, json={"error": {"message": "not here"}})

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    model = resolve_model(spec, http_client=client, stream=False, **options)
    with pytest.raises(Exception):  # noqa: B017 - only the request matters here
        await ask(model)
    return seen[0].headers


@pytest.mark.parametrize(
    ("spec", "header", "value"),
    [
        ("openai:gpt-4o", "authorization", "Bearer sk-openai-env"),
        ("openai-responses:gpt-5", "authorization", "Bearer sk-openai-env"),
        ("anthropic:claude-sonnet-4-5", "x-api-key", "sk-ant-env"),
        ("groq:llama", "authorization", "Bearer sk-groq-env"),
        ("ollama:qwen3", "authorization", "Bearer sk-ollama-env"),
        ("anthropic:claude-sonnet-4-5@https://api.anthropic.com/v1", "x-api-key", "sk-ant-env"),
        ("google:gemini-2.5-flash", "x-goog-api-key", "sk-google-env"),
    ],
)
async def test_environment_keys_still_reach_their_own_host(
    spec: str, header: str, value: str
) -> None:
    assert (await home_headers(spec))[header] == value


async def test_gemini_takes_google_api_key_first_then_gemini_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The order Google's own SDK reads them in.
    assert (await home_headers("google:gemini-2.5-flash"))["x-goog-api-key"] == "sk-google-env"
    monkeypatch.delenv("GOOGLE_API_KEY")
    assert (await home_headers("google:gemini-2.5-flash"))["x-goog-api-key"] == "sk-gemini-env"
    headers = await home_headers("google:gemini-2.5-flash@https://gemini-proxy.example/v1beta")
    assert "x-goog-api-key" not in headers and "authorization" not in headers


async def test_a_key_variable_does_not_follow_a_scheme_downgrade() -> None:
    headers = await home_headers("openai:gpt-4o@http://api.openai.com/v1")
    assert "authorization" not in headers


def test_naming_a_providers_variable_for_another_host_is_refused(server: FakeServer) -> None:
    with pytest.raises(ConfigurationError) as caught:
        resolve_model(f"openai:m@{server.base_url}", api_key_env="OPENAI_API_KEY")
    message = str(caught.value)
    assert "OPENAI_API_KEY" in message and "api.openai.com" in message
    assert "api_key=" in message
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        resolve_model(f"groq:m@{server.base_url}", api_key_env="ANTHROPIC_API_KEY")


async def test_a_variable_of_the_users_own_goes_where_the_user_points_it(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_PROXY_KEY", "sk-local")
    await ask(
        resolve_model(f"anthropic:m@{server.anthropic_base_url}", api_key_env="LOCAL_PROXY_KEY")
    )
    assert auth_of(server) == {"x-api-key": "sk-local"}


@pytest.mark.parametrize("prefix", sorted(ADAPTERS))
async def test_a_refusal_from_a_foreign_host_says_the_key_was_withheld(prefix: str) -> None:
    async with FakeServer(api_key="sk-server") as keyed:
        model = resolve_model(f"{prefix}:m@{loopback(prefix, keyed)}")
        with pytest.raises(AuthenticationError) as caught:
            await ask(model)
    variable = HOME_VARIABLE.get(prefix, "OPENAI_API_KEY")
    message = str(caught.value)
    assert variable in message and "api_key=" in message
    assert ENV_KEYS[variable] not in message


def test_a_missing_key_at_home_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ENV_KEYS:
        monkeypatch.delenv(variable)
    for spec, variable in [
        ("openai:gpt-4o", "OPENAI_API_KEY"),
        ("openai-responses:gpt-5", "OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("deepseek:chat", "DEEPSEEK_API_KEY"),
        ("google:gemini-2.5-flash", "GOOGLE_API_KEY or GEMINI_API_KEY"),
    ]:
        with pytest.raises(ConfigurationError, match=variable):
            resolve_model(spec)
    # Keyless servers elsewhere need nothing at all.
    resolve_model("anthropic:m@http://127.0.0.1:9")


SECRET = "sk-live-5f0c2a9e71d84b36a0e1c7d2b9f4e815"


def _no_secret(text: object, secret: str = SECRET) -> None:
    assert secret not in str(text)


@pytest.mark.parametrize("prefix", sorted(ADAPTERS))
@pytest.mark.parametrize("stream", [True, False])
async def test_a_key_the_provider_echoes_is_redacted_everywhere(
    server: FakeServer,
    prefix: str,
    stream: bool,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    echo = f"Incorrect API key provided: Bearer {SECRET}; x-api-key: {SECRET}"
    server.script(
        # Mid-stream (or, unstreamed, a 529): retried, so logged and told as an event.
        FakeServer.stream_error(message=f"upstream said no to Bearer {SECRET}"),
        FakeServer.error(401, message=echo),
    )
    model = resolve_model(f"{prefix}:m@{loopback(prefix, server)}", api_key=SECRET, stream=stream)
    events: list[Event] = []
    retry = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.001)
    async with Runtime(store=SQLiteBackend(tmp_path / "log.db").store) as runtime:
        session = await runtime.create_session(Agent("a", model))
        with (
            caplog.at_level(logging.INFO, logger="taskloom"),
            pytest.raises(AuthenticationError) as caught,
        ):
            await session.run("hi", options=RunOptions(retry=retry), emit=events.append)
        entries = await runtime.store.load(session.id)
    error = caught.value
    assert "Incorrect API key provided" in str(error)
    for text in (str(error), repr(error), error.message, error.args, error.body):
        _no_secret(text)
    retries = [e for e in events if isinstance(e, RetryAttempt)]
    assert len(retries) == 1 and "upstream said no" in retries[0].error
    _no_secret(retries[0].error)
    assert "upstream said no" in caplog.text
    _no_secret(caplog.text)
    [finished] = [e.payload for e in entries if isinstance(e.payload, RunFinishedEntry)]
    assert finished.status is RunStatus.FAILED
    assert finished.error is not None and "Incorrect API key provided" in finished.error
    _no_secret(finished.error)


async def test_credentials_given_as_headers_are_redacted_too(server: FakeServer) -> None:
    token = "dXNlcjpjb3JyZWN0LWhvcnNlLWJhdHRlcnk="
    server.script(FakeServer.error(403, message=f"denied: Basic {token} / api-key {SECRET}"))
    model = resolve_model(
        f"openai:m@{server.base_url}",
        headers={"Authorization": f"Basic {token}", "api-key": SECRET, "x-team": "research-2"},
    )
    with pytest.raises(AuthenticationError) as caught:
        await ask(model)
    message = str(caught.value)
    assert (
        message.startswith("openai 403 ") and "denied: [redacted] / api-key [redacted]" in message
    )
    _no_secret(message)
    _no_secret(message, token)
