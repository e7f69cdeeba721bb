"""Gemini (`generateContent`, `streamGenerateContent?alt=sse`), on the Gemini API or Vertex AI.

Wire decisions, for readers comparing bodies with Google's documentation:

- Endpoints: `{base_url}/models/{model}:generateContent`, or
  `:streamGenerateContent?alt=sse` (same body). The Gemini API takes its key
  in `x-goog-api-key`; Vertex AI (`{location}-aiplatform.googleapis.com/
  v1beta1/projects/{project}/locations/{location}/publishers/google`) the
  caller's access token as `Authorization: Bearer`.
- History: assistant turns are `model` contents; tool results are
  `functionResponse` parts of a `user` content (results first), matched to
  their calls by id and name, as `{"output": text}` or `{"error": text}`.
  Consecutive contents of one role merge.
- Thought signatures go back where Gemini put them (see `_gemini_stream`),
  only to the provider and model that wrote them. In a turn another wrote,
  the first function call carries Google's documented
  `skip_thought_signature_validator`: Gemini 3 refuses unsigned calls.
- Tools: one `functionDeclarations` list, schemas mapped by `_gemini_schema`
  (what cannot be expressed is a `ConfigurationError` naming the tool).
- Reasoning: `budget_tokens` is `thinkingBudget`; `effort` is `thinkingLevel`
  on Gemini 3 on, a budget sized from it on 2.5; either asks for thought
  summaries. Models before 2.5 get no thinking settings.
- Structured output: `responseJsonSchema`. Before Gemini 3 a request cannot
  hold both tools and a response schema: it gets a function named
  `request.output_name` instead (mode `ANY`), whose call comes back as the
  JSON text answer, and `native_output` is false.
- `settings.extra` is merged into the body last, dict values one level deep;
  a `None` value removes that key.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, ProviderError
from ..messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
)
from ..results import ToolSpec
from ._adapter import WireModel, checked_base_url
from ._base import (
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ReasoningOptions,
    StreamEvent,
)
from ._gemini_schema import function_name, gemini_schema, tool_parameters
from ._gemini_stream import OutputTool, StreamAssembler
from ._resolve import GOOGLE, VERTEX
from ._wire import arguments_object, memoized, merge_extra, present, replayed_deltas

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._adapter import WireOptions

SKIP_SIGNATURE = base64.b64encode(b"skip_thought_signature_validator").decode()
"""The thought signature Google documents for a function call Gemini did not make."""

_EFFORT_BUDGET = {"minimal": 512, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 24576}
_VERSION = re.compile(r"gemini-(\d+)(?:\.(\d+))?(?:-|$)")
_PATH_PART = re.compile(r"[A-Za-z0-9_-]+")
_MULTI_REGIONS = frozenset({"us", "eu"})  # served from aiplatform.{location}.rep.googleapis.com
_MEMO = "gemini"  # this wire format's keys in a `ModelRequest.memo`

_Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Family:
    """What a model name says about its capabilities (an unknown name: the newest)."""

    version: tuple[int, int] | None
    is_flash: bool

    @classmethod
    def of(cls, name: str) -> _Family:
        lowered = name.lower()
        found = _VERSION.search(lowered)
        version = None if found is None else (int(found[1]), int(found[2] or 0))
        return cls(version, "flash" in lowered)

    @property
    def thinks(self) -> bool:
        return self.version is None or self.version >= (2, 5)

    @property
    def gemini_3(self) -> bool:
        """Gemini 3 and later: thinking by level, not budget, and a request may
        carry both tools and a response schema."""
        return self.version is None or self.version >= (3, 0)


class GeminiModel(WireModel):
    """A Gemini model over the Gemini API (see `WireModel` for the options);
    `GeminiModel.vertex(...)` reaches the same models on Vertex AI. The key is
    `api_key=`, else `GOOGLE_API_KEY`, else `GEMINI_API_KEY` (sent only to
    Google's host). With `stream=False`, `stream()` replays the answer as deltas.
    """

    __slots__ = ("_family", "_vertex")

    _HOME = GOOGLE

    def __init__(self, model_name: str, **options: Unpack[WireOptions]) -> None:
        self._family = _Family.of(model_name)
        # Set before the base reads the headers (`_wire_headers`).
        self._vertex = False
        super().__init__(model_name, **options)

    @classmethod
    def vertex(
        cls,
        model_name: str,
        *,
        project: str | None = None,
        location: str | None = None,
        token: str | None = None,
        **options: Unpack[WireOptions],
    ) -> GeminiModel:
        """A Gemini model on Vertex AI, provider `vertex`.

        `project` and `location` (else `GOOGLE_CLOUD_PROJECT` and
        `GOOGLE_CLOUD_LOCATION`, else `global`) name the server, unless
        `base_url=` gives it whole. `token` (or `api_key=`) is an OAuth access
        token (`gcloud auth print-access-token`), never read from the
        environment; one lasts about an hour, so a long-lived process gives an
        `http_client` whose `auth` refreshes it. Without a project, or without
        a token, an Authorization header or a client, `ConfigurationError`.
        """
        if token is not None:
            if options.get("api_key") not in (None, token):
                raise ConfigurationError("give Vertex AI's access token once: token= or api_key=")
            options["api_key"] = token
        if options.get("base_url") is None:
            options["base_url"] = _vertex_url(project, location)
        elif project is not None or location is not None:
            raise ConfigurationError(
                "give Vertex AI's project and location, or a base_url= naming them, not both"
            )
        model = cls.__new__(cls)
        model._on_vertex(model_name, options)
        return model

    def _on_vertex(self, model_name: str, options: WireOptions) -> None:
        self._family = _Family.of(model_name)
        self._vertex = True
        self._configure(model_name, VERTEX.name, VERTEX, options)
        has_auth = any(k.lower() == "authorization" for k in self._target.headers)
        if not has_auth and options.get("http_client") is None:
            raise ConfigurationError(
                "no access token for Vertex AI: pass token= (e.g. the output of "
                "`gcloud auth print-access-token`), an Authorization header, or an "
                "http_client whose auth adds one; on the command line, "
                "--api-key-env NAME naming a variable that holds the token"
            )

    def _native_output(self) -> bool:
        # Before Gemini 3, a response schema cannot go with tools: agents ask
        # through their final-answer tool, which works with or without tools.
        return self._family.gemini_3

    def _endpoint(self, base_url: str) -> str:
        return f"{base_url}/{self._model_path()}:generateContent"

    def _stream_endpoint(self, base_url: str) -> str:
        return f"{base_url}/{self._model_path()}:streamGenerateContent?alt=sse"

    def _model_path(self) -> str:
        # `tunedModels/...` and `models/...` are paths of their own.
        return self._name if "/" in self._name else f"models/{self._name}"

    def _wire_headers(self, key: str | None) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if key is not None:
            if self._vertex:
                headers["Authorization"] = f"Bearer {key}"
            else:
                headers["x-goog-api-key"] = key
        return headers

    def _encode(self, request: ModelRequest, settings: ModelSettings, stream: bool) -> _Json:
        body: _Json = {"contents": self._contents(request)}
        if request.system:
            body["systemInstruction"] = {"parts": [{"text": request.system}]}
        declarations = self._declarations(request.tools, request.memo)
        output_tool = self._output_tool(request)
        if output_tool is not None and request.output_schema is not None:
            declarations = [*declarations, _output_declaration(output_tool, request, self._vertex)]
            body["toolConfig"] = {"functionCallingConfig": {"mode": "ANY"}}
        if declarations:
            body["tools"] = [{"functionDeclarations": declarations}]
        config = present(
            temperature=settings.temperature,
            topP=settings.top_p,
            maxOutputTokens=settings.max_tokens,
            stopSequences=list(settings.stop) or None,
            thinkingConfig=_thinking(self._family, settings.reasoning),
        )
        if request.output_schema is not None and output_tool is None:
            config["responseMimeType"] = "application/json"
            schema = request.output_schema
            config["responseJsonSchema"] = memoized(
                request.memo, (_MEMO, "output"), schema, gemini_schema, schema, "output schema"
            )
        if config:
            body["generationConfig"] = config
        merge_extra(body, settings.extra, drop_nested_none=True)
        return body

    def _output_tool(self, request: ModelRequest) -> OutputTool | None:
        schema = request.output_schema
        if schema is None or not request.tools or self._family.gemini_3:
            return None
        return OutputTool(request.output_name, schema.get("type") != "object")

    def _declarations(self, tools: Sequence[ToolSpec], memo: dict[Any, Any] | None) -> list[_Json]:
        if not tools:
            return []
        key = (_MEMO, "tools", self._vertex)
        return memoized(memo, key, tools, lambda: [_declaration(t, self._vertex) for t in tools])

    def _contents(self, request: ModelRequest) -> list[_Json]:
        out: list[_Json] = []
        memo = request.memo
        names: dict[str, str] | None = None
        for message in request.messages:
            key = (_MEMO, self._provider, self._name, id(message))
            kept = memo.get(key) if memo is not None else None
            if kept is not None and kept[0] is message:
                role, parts = kept[1], kept[2]
            else:
                if message.role == "assistant":
                    role, parts = "model", self._model_parts(message)
                else:
                    if names is None and _needs_names(message):
                        names = _call_names(request.messages)
                    role, parts = "user", _user_parts(message, names or {})
                if memo is not None and not _needs_names(message):
                    # The message object stays in the value: its id is not reused meanwhile.
                    memo[key] = (message, role, parts)
            if out and out[-1]["role"] == role:
                if parts:
                    merged = out[-1]["parts"] + parts
                    if role == "user":
                        merged.sort(key=lambda p: "functionResponse" not in p)
                    out[-1]["parts"] = merged
                continue
            out.append({"role": role, "parts": list(parts) or [{"text": ""}]})
        return out

    def _model_parts(self, message: Message) -> list[_Json]:
        # Another provider's or model's signatures are dropped with its thinking.
        own = message.provider == self._provider and message.model == self._name
        parts: list[_Json] = []
        pending: str | None = None
        signed_call = False
        for block in message.blocks:
            if isinstance(block, ThinkingBlock):
                if not own or block.provider != self._provider or block.redacted:
                    continue
                if pending is not None:
                    parts.append({"text": "", "thoughtSignature": pending})
                    pending = None
                if block.text:
                    part: _Json = {"text": block.text, "thought": True}
                    if block.signature:
                        part["thoughtSignature"] = block.signature
                    parts.append(part)
                elif block.signature:
                    pending = block.signature
                continue
            if isinstance(block, TextBlock):
                if not block.text and pending is None:
                    continue
                part = {"text": block.text}
            elif isinstance(block, ToolCall):
                call: _Json = {"name": block.name, "args": arguments_object(block)}
                if block.id:
                    call["id"] = block.id
                part = {"functionCall": call}
                if pending is None and not signed_call and not own:
                    pending = SKIP_SIGNATURE
                signed_call = True
            else:
                continue
            if pending is not None:
                part["thoughtSignature"] = pending
                pending = None
            parts.append(part)
        if pending is not None:
            parts.append({"text": "", "thoughtSignature": pending})
        return parts

    def _assembler(self, request: ModelRequest, emit: bool) -> StreamAssembler:
        return StreamAssembler(
            self._provider, self._name, request, self._output_tool(request), emit
        )

    def _decode(self, payload: Any, request: ModelRequest) -> ModelResponse:
        if not isinstance(payload, dict):
            raise ProviderError(
                f"response is not a Gemini answer: {json.dumps(payload)[:200]}",
                status=200,
                provider=self._provider,
                retryable=False,
            )
        answer = self._assembler(request, emit=False)
        answer.take(payload)
        return answer.finish(whole=True)

    def _replayed(self, response: ModelResponse) -> Iterable[StreamEvent]:
        return replayed_deltas(response.message)


def _vertex_url(project: str | None, location: str | None) -> str:
    project = project or os.environ.get("GOOGLE_CLOUD_PROJECT")
    location = location or os.environ.get("GOOGLE_CLOUD_LOCATION") or "global"
    if not project:
        raise ConfigurationError(
            "Vertex AI needs a project: pass project= or set GOOGLE_CLOUD_PROJECT"
        )
    for what, value in (("project", project), ("location", location)):
        if not _PATH_PART.fullmatch(value):
            raise ConfigurationError(f"{value!r} is not a Vertex AI {what}")
    host = "aiplatform.googleapis.com"
    if location in _MULTI_REGIONS:
        host = f"aiplatform.{location}.rep.googleapis.com"
    elif location != "global":
        host = f"{location}-{host}"
    url = f"https://{host}/v1beta1/projects/{project}/locations/{location}/publishers/google"
    return checked_base_url(url)


def _declaration(spec: ToolSpec, vertex: bool) -> _Json:
    return {
        "name": function_name(spec.name, vertex=vertex),
        "description": spec.description,
        "parametersJsonSchema": tool_parameters(spec.name, spec.input_schema),
    }


def _output_declaration(tool: OutputTool, request: ModelRequest, vertex: bool) -> _Json:
    schema: Mapping[str, Any] = request.output_schema or {}
    if tool.wrapped:
        schema = {"type": "object", "properties": {"response": schema}, "required": ["response"]}
    return _declaration(
        ToolSpec(tool.name, "Give the final answer, following this schema.", schema), vertex
    )


def _thinking(family: _Family, reasoning: ReasoningOptions | None) -> _Json | None:
    if reasoning is None or not family.thinks:
        return None
    config: _Json = {"includeThoughts": True}
    effort = reasoning.effort
    if reasoning.budget_tokens is not None:
        config["thinkingBudget"] = reasoning.budget_tokens
    elif effort is not None and family.gemini_3:
        if effort == "minimal":
            # Only Flash models think at the minimal level.
            config["thinkingLevel"] = "minimal" if family.is_flash else "low"
        else:
            config["thinkingLevel"] = "high" if effort == "xhigh" else effort
    elif effort is not None:
        config["thinkingBudget"] = _EFFORT_BUDGET[effort]
    return config


def _needs_names(message: Message) -> bool:
    return any(isinstance(b, ToolResult) and not b.tool_name for b in message.blocks)


def _call_names(messages: Iterable[Message]) -> dict[str, str]:
    return {
        block.id: block.name
        for message in messages
        if message.role == "assistant"
        for block in message.blocks
        if isinstance(block, ToolCall)
    }


def _user_parts(message: Message, names: Mapping[str, str]) -> list[_Json]:
    results: list[_Json] = []
    parts: list[_Json] = []
    for block in message.blocks:
        if isinstance(block, ToolResult):
            name = block.tool_name or names.get(block.tool_call_id, "")
            response = {"error" if block.is_error else "output": block.content}
            answer: _Json = {"name": name, "response": response}
            if block.tool_call_id:
                answer["id"] = block.tool_call_id
            results.append({"functionResponse": answer})
        elif isinstance(block, TextBlock):
            parts.append({"text": block.text})
        elif isinstance(block, ImageBlock):
            if block.url is not None:
                parts.append({"fileData": {"mimeType": block.media_type, "fileUri": block.url}})
            else:
                parts.append({"inlineData": {"mimeType": block.media_type, "data": block.base64}})
    return results + parts
