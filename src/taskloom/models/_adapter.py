"""`WireModel`, the base of the HTTP wire adapters.

A wire module says only how a request is encoded (`_encode`), a stream
assembled (`_assembler`) and a whole answer decoded (`_decode`). Configuration
is settled here once: default settings under each request's own, the base
URL (checked at construction, shown without user-info), the key (`api_key=`
goes wherever the model points, a key from a provider's variable only to that
provider's host: `KEY_HOMES`), headers, endpoint, client, and the credentials
every error has redacted.
"""

from __future__ import annotations

import dataclasses
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypedDict
from urllib.parse import urlsplit

import httpx2

from .._redact import credentials, mentions, redact_value, safe_url
from ..errors import APIKeyMissing, ConfigurationError, ContextWindowExceeded, ProviderError
from ..messages import Message
from ._base import (
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ResponseCompleted,
    StreamEvent,
)
from ._http import (
    SSE,
    SSEDecoder,
    Target,
    default_client,
    names_body_headers,
    open_stream,
    redact_error,
    send_json,
    transport_error,
)
from ._resolve import ANTHROPIC, GOOGLE, OPENAI_RESPONSES, PRESETS, VERTEX, Preset
from ._wire import estimate_tokens, known_context_window, request_chars

if TYPE_CHECKING:
    from typing_extensions import Unpack

_Origin = tuple[str, str, int]
_VALID_URL = "a base URL is http:// or https:// with a host, e.g. http://127.0.0.1:8000/v1"


class WireOptions(TypedDict, total=False):
    """The keyword options every wire adapter takes.

    `api_key` is sent wherever the model points; without it the key comes
    from the variable `api_key_env` (by default the provider's own, e.g.
    `OPENAI_API_KEY`), only when the model points at that provider's host;
    `api_key_env=None` sends no key. `base_url` defaults to the provider's
    server; `http_client` replaces the shared pooled client; `headers` go with
    every request; `stream` chooses the HTTP path `request()` uses; `settings`
    are defaults under each request's own. `native_output=False`: the server
    has no structured output, agents ask through a final-answer tool.
    """

    api_key: str | None
    base_url: str | None
    http_client: httpx2.AsyncClient | None
    headers: Mapping[str, str] | None
    stream: bool
    api_key_env: str | None
    settings: ModelSettings | None
    native_output: bool


class Assembly(Protocol):
    """Folds one streamed answer into deltas and, at its end, the whole response."""

    def feed(self, sse: SSE) -> Iterable[StreamEvent]:
        """Take one server-sent event; return the deltas it carried."""
        ...

    def finish(self) -> ModelResponse:
        """The whole response; a stream cut before its end raises `TransportError`."""
        ...


def merge_settings(default: ModelSettings | None, override: ModelSettings) -> ModelSettings:
    """A request's settings over a model's defaults, field by field (None is unset;
    `stop` is the request's when it has any; `extra` merges, the request's winning)."""
    if default is None:
        return override
    return ModelSettings(
        temperature=default.temperature if override.temperature is None else override.temperature,
        top_p=default.top_p if override.top_p is None else override.top_p,
        max_tokens=default.max_tokens if override.max_tokens is None else override.max_tokens,
        stop=override.stop or default.stop,
        reasoning=default.reasoning if override.reasoning is None else override.reasoning,
        extra={**default.extra, **override.extra},
        context_window=(
            default.context_window if override.context_window is None else override.context_window
        ),
    )


def context_overflow(
    request: ModelRequest, window: int | None, provider: str, answer: str
) -> ContextWindowExceeded | None:
    """`ContextWindowExceeded` for a request estimated not to fit a known `window`,
    else None; `answer` says what the server sent instead (`an empty stream`)."""
    if window is None:
        return None
    chars = request_chars(request)
    tokens = estimate_tokens(chars)
    if tokens < window:
        return None
    return ContextWindowExceeded(
        f"the server sent {answer} for a request of about {tokens} tokens "
        f"(estimated from {chars} characters), which does not fit the model's "
        f"context window of {window} tokens",
        status=200,
        provider=provider,
        retryable=False,
    )


def checked_base_url(url: str) -> str:
    """`url` without a trailing slash, or `ConfigurationError` naming what is wrong
    (caught by the client, it would be a transport error retried in vain)."""
    problem = None
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if "://" not in url:
        problem = "has no http:// or https:// scheme"
    elif scheme not in ("http", "https"):
        problem = f"uses the unsupported protocol {scheme or '(none)'}://"
    elif not parts.hostname:
        problem = "has no host"
    else:
        try:
            parts.port  # noqa: B018 - parsing the port is the check
        except ValueError:
            problem = "has an invalid port"
    if problem is not None:
        raise ConfigurationError(f"base URL {safe_url(url)!r} {problem}: {_VALID_URL}")
    return url.rstrip("/")


def _origin(url: str) -> _Origin:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80)


def same_origin(url: str, other: str) -> bool:
    """Whether two URLs reach the same scheme, host and port."""
    return _origin(url) == _origin(other)


def _shown(origin: _Origin) -> str:
    scheme, host, port = origin
    default = 443 if scheme == "https" else 80
    return f"{scheme}://{host}" + ("" if port == default else f":{port}")


KEY_HOMES: Mapping[str, _Origin] = MappingProxyType(
    {
        variable: _origin(p.base_url)
        for p in (*PRESETS.values(), OPENAI_RESPONSES, ANTHROPIC, GOOGLE, VERTEX)
        for variable in p.key_envs
    }
)
"""The host (scheme, name, port) each provider's key variable belongs to: its
key goes there and nowhere else (other variables are the user's own)."""


def _choose_key(
    options: WireOptions, home: Preset, url: str, provider: str
) -> tuple[str | None, str | None]:
    explicit = options.get("api_key")
    if explicit is not None:
        return explicit, None
    named = "api_key_env" in options
    if named:
        variable = options.get("api_key_env")
        variables: tuple[str, ...] = () if variable is None else (variable,)
    else:
        variables = home.key_envs
    if not variables:
        return None, None
    shown = " or ".join(variables)
    owner = KEY_HOMES.get(variables[0])
    if owner is not None and owner != _origin(url):
        verb = "is" if len(variables) == 1 else "are"
        why = (
            f"no key was sent to {safe_url(url)}: {shown} {verb} sent only to "
            f"{_shown(owner)}, keys from the environment never go to other hosts; "
            f"pass the key explicitly (api_key=... or api_key_env=NAME in code, "
            f"--api-key-env NAME on the command line) to send one to this server"
        )
        if named:
            raise ConfigurationError(why)
        return None, why
    for variable in variables:
        value = os.environ.get(variable)
        if value:
            return value, None
    if named or home.key_required:
        raise APIKeyMissing(provider, variables)
    return None, None


class WireModel(ABC):
    """A model behind an HTTP wire API (see `WireOptions` for the options).
    Construction does no I/O; a wrong base URL or a missing key raises
    `ConfigurationError` here, not at the first request."""

    __slots__ = (
        "_base_url",
        "_client",
        "_home",
        "_name",
        "_native",
        "_provider",
        "_raw_body",
        "_settings",
        "_stream",
        "_stream_target",
        "_target",
    )

    _HOME: ClassVar[Preset]

    def __init__(self, model_name: str, **options: Unpack[WireOptions]) -> None:
        self._configure(model_name, self._HOME.name, self._HOME, options)

    def _configure(
        self, model_name: str, provider: str, home: Preset, options: WireOptions
    ) -> None:
        unknown = options.keys() - WireOptions.__optional_keys__
        if unknown:
            raise TypeError(
                f"{type(self).__name__}() got unexpected keyword arguments: "
                + ", ".join(sorted(unknown))
            )
        base_url = checked_base_url(options.get("base_url") or home.base_url)
        key, why_no_key = _choose_key(options, home, base_url, provider)
        headers = self._wire_headers(key)
        headers.update(options.get("headers") or {})
        self._name = model_name
        self._provider = provider
        self._home = home
        self._base_url = base_url
        self._client = options.get("http_client")
        self._stream = options.get("stream", True)
        self._settings = options.get("settings")
        self._native = options.get("native_output")
        # A body encoded beforehand goes with the headers httpx2 gives a JSON
        # body (`json_headers`): not where the caller set either of them.
        self._raw_body = not names_body_headers(headers)
        self._target = Target(
            self._endpoint(base_url),
            headers,
            provider,
            why_no_key,
            credentials(keys=(key,), headers=headers, urls=(base_url,)),
        )
        stream_url = self._stream_endpoint(base_url)
        self._stream_target = (
            self._target
            if stream_url == self._target.url
            else dataclasses.replace(self._target, url=stream_url)
        )

    @property
    def name(self) -> str:
        """The model's name as its server knows it."""
        return self._name

    @property
    def provider(self) -> str:
        """The wire API or server (`openai`, `openai-responses`, `anthropic`, `ollama`, ...)."""
        return self._provider

    @property
    def native_output(self) -> bool:
        """Whether the model takes `ModelRequest.output_schema` as structured
        output of its own (`native_output=` overrides the adapter's judgement)."""
        native = self._native
        return self._native_output() if native is None else native

    def _native_output(self) -> bool:
        return True

    @property
    def credentials(self) -> tuple[str, ...]:
        """The secrets this model's requests carry (key, credential headers, base
        URL user-info), longest first: no error, answer or recording holds them."""
        return self._target.secrets

    @property
    def base_url(self) -> str:
        """The server requests go to, without user-info and trailing slash."""
        return safe_url(self._base_url)

    @property
    def url(self) -> str:
        """The endpoint `request()` posts to (streaming or not), without user-info."""
        return safe_url((self._stream_target if self._stream else self._target).url)

    @property
    def spec(self) -> str:
        """The `resolve_model` string for an equivalent model: `prefix:name`, with
        `@<base_url>` off the provider's default server; never a key or user-info."""
        prefix = self._home.name
        if self._base_url == self._home.base_url and self._provider == prefix:
            return f"{prefix}:{self._name}"
        return f"{prefix}:{self._name}@{self.base_url}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"

    def build_body(self, request: ModelRequest, *, stream: bool | None = None) -> dict[str, Any]:
        """The JSON body this model sends for `request` (no I/O); `stream`
        defaults to the model's own choice."""
        settings = merge_settings(self._settings, request.settings)
        return self._encode(request, settings, self._stream if stream is None else stream)

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send the request (streamed or not, per `stream=`) and return the whole response."""
        if self._stream:
            return await self._collected(request)
        # `_whole`, written out: no coroutine of its own on every request.
        body = self.build_body(request, stream=False)
        try:
            encoded = self._sent_body(request, body)
            target = self._target_for(request, False)
            payload = await send_json(self._http(), target, body, encoded)
            return self._checked(self._decode(payload, request), request)
        except ProviderError as exc:
            redact_error(exc, self._target.secrets)
            raise

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Send the request, yielding deltas; the last event is `ResponseCompleted`.
        A consumer that stops early closes the connection by closing this iterator."""
        if self._stream:
            return self._streamed(request, emit=True)
        return self._replay(request)

    async def _whole(self, request: ModelRequest) -> ModelResponse:
        body = self.build_body(request, stream=False)
        try:
            encoded = self._sent_body(request, body)
            target = self._target_for(request, False)
            payload = await send_json(self._http(), target, body, encoded)
            return self._checked(self._decode(payload, request), request)
        except ProviderError as exc:
            # Errors the wire module built from the answer (an error object
            # with a 200, an unexpected body) may quote it: credentials too.
            redact_error(exc, self._target.secrets)
            raise

    async def _replay(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        response = await self._whole(request)
        for event in self._replayed(response):
            yield event
        yield ResponseCompleted(response)

    async def _streamed(self, request: ModelRequest, *, emit: bool) -> AsyncIterator[StreamEvent]:
        assembly = self._assembler(request, emit)
        body = self.build_body(request, stream=True)
        decoder = SSEDecoder()
        decode, feed = decoder.line, assembly.feed
        try:
            encoded = self._sent_body(request, body)
            target = self._target_for(request, True)
            async with open_stream(self._http(), target, body, encoded) as response:
                # Read to the end of the body even after the last event: a body
                # left unread makes the client close the connection, not pool it.
                try:
                    async for line in response.aiter_lines():
                        sse = decode(line)
                        if sse is not None:
                            for event in feed(sse):
                                if emit:
                                    yield event
                except httpx2.HTTPError as exc:
                    raise transport_error(exc, self._provider) from exc
                sse = decoder.end(at_eof=True)
                if sse is not None:
                    for event in assembly.feed(sse):
                        if emit:
                            yield event
            completed = self._checked(assembly.finish(), request)
        except ProviderError as exc:
            # An error event in the stream may quote what the server was sent.
            redact_error(exc, self._target.secrets)
            raise
        yield ResponseCompleted(completed)

    async def _collected(self, request: ModelRequest) -> ModelResponse:
        """`_streamed` when nobody wants the deltas, as one coroutine: the
        events are assembled, never yielded (no generator step per request,
        no list per event)."""
        assembly = self._assembler(request, False)
        body = self.build_body(request, stream=True)
        decoder = SSEDecoder()
        decode, feed = decoder.line, assembly.feed
        try:
            encoded = self._sent_body(request, body)
            target = self._target_for(request, True)
            async with open_stream(self._http(), target, body, encoded) as response:
                # Read to the end of the body even after the last event: a body
                # left unread makes the client close the connection, not pool it.
                try:
                    async for line in response.aiter_lines():
                        sse = decode(line)
                        if sse is not None:
                            # Drained: some assemblies feed lazily.
                            for _ in feed(sse):
                                pass
                except httpx2.HTTPError as exc:
                    raise transport_error(exc, self._provider) from exc
                sse = decoder.end(at_eof=True)
                if sse is not None:
                    for _ in feed(sse):
                        pass
            return self._checked(assembly.finish(), request)
        except ProviderError as exc:
            # An error event in the stream may quote what the server was sent.
            redact_error(exc, self._target.secrets)
            raise

    def _http(self) -> httpx2.AsyncClient:
        return self._client if self._client is not None else default_client()

    def _window(self, request: ModelRequest) -> int | None:
        window = merge_settings(self._settings, request.settings).context_window
        return known_context_window(self._name) if window is None else window

    def _checked(self, response: ModelResponse, request: ModelRequest) -> ModelResponse:
        # An echoed credential is redacted from the answer, as from errors;
        # an empty answer to a request over the window is an overflow (how
        # llama.cpp behind a router answers one).
        message = response.message
        secrets = self._target.secrets
        if secrets:
            data = message.to_dict()
            # Checked in one dump; walked and rebuilt only when a secret may be there.
            cleaned = redact_value(data, secrets) if mentions(data, secrets) else data
            if cleaned is not data and cleaned != data:
                message = Message.from_dict(cleaned)
                response = dataclasses.replace(response, message=message)
        if message.text or message.tool_calls:
            return response
        overflow = context_overflow(
            request, self._window(request), self._provider, "an empty answer"
        )
        if overflow is not None:
            raise overflow
        return response

    def _wire_headers(self, key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _target_for(self, request: ModelRequest, stream: bool) -> Target:
        """Where this request goes, with which headers: the model's own target
        unless the request needs more (a beta feature a tool turns on)."""
        return self._stream_target if stream else self._target

    @abstractmethod
    def _endpoint(self, base_url: str) -> str: ...

    def _stream_endpoint(self, base_url: str) -> str:
        return self._endpoint(base_url)

    @abstractmethod
    def _encode(
        self, request: ModelRequest, settings: ModelSettings, stream: bool
    ) -> dict[str, Any]: ...

    def _sent_body(self, request: ModelRequest, body: dict[str, Any]) -> bytes | None:
        # A caller's client may name a body's headers too (its own go under
        # the request's): checked at each request, as the client's headers
        # may change after the model is made.
        if not self._raw_body:
            return None
        client = self._client
        if client is not None and names_body_headers(client.headers):
            return None
        return self._encoded(request, body)

    def _encoded(self, request: ModelRequest, body: dict[str, Any]) -> bytes | None:
        """`body` encoded as httpx2 encodes a `json=` body, when this wire can
        do it for less (see `json_body`); None: httpx2 encodes it."""
        return None

    @abstractmethod
    def _assembler(self, request: ModelRequest, emit: bool) -> Assembly:
        """A fresh assembly for one streamed answer (`emit`: whether deltas are wanted)."""

    @abstractmethod
    def _decode(self, payload: Any, request: ModelRequest) -> ModelResponse: ...

    def _replayed(self, response: ModelResponse) -> Iterable[StreamEvent]:
        """Deltas `stream()` yields before `ResponseCompleted` when not streaming."""
        return ()
