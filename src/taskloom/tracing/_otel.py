"""The OpenTelemetry GenAI observer: spans and metrics for runs, model requests, tool calls.

Spans (names and attributes of the GenAI semantic conventions):

    invoke_agent {agent}        INTERNAL, a run (a resume links to the run it resumes)
      chat {model}              CLIENT, one model request with its transport retries
      execute_tool {tool}       INTERNAL, one tool call; a child's run nests under it

A host queueing runs for workers (`Session.submit`, `submit_resume`, `wait`):

    submit queued run           PRODUCER; the worker's `invoke_agent` nests under it
    wait queued run             INTERNAL, linked to the run it waited on

Metrics: `gen_ai.client.token.usage` (by `gen_ai.token.type`) and
`gen_ai.client.operation.duration`, per model request, with the conventions'
bucket boundaries.

Failures set `error.type` (an HTTP status, `timeout`, or the exception's
class name) and an ERROR status described by that type alone: an error
message, which might echo a key, never reaches a span. Content is recorded
only when asked, capped in size.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from ..errors import ProviderError
from ..loop.ports import EndRun, RunInfo
from ..messages import ToolCall
from ..models import Model, ModelRequest, ModelResponse
from ..results import RunResult, RunStatus
from ..tools import Tool, ToolOutput
from ._content import (
    MAX_CONTENT_CHARS,
    agent_id,
    capped,
    capped_json,
    finish_reason,
    input_tokens,
    message_parts,
    provider_name,
    server_of,
)

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The environment variable that turns content capture on (`true`)."""

TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                 16777216, 67108864)  # fmt: skip
"""Bucket boundaries of `gen_ai.client.token.usage` (the conventions' advice)."""

DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92)  # fmt: skip
"""Bucket boundaries of `gen_ai.client.operation.duration`, seconds (the conventions' advice)."""

_W3C = TraceContextTextMapPropagator()


class GenAIObserver:
    """Traces runs as OpenTelemetry GenAI spans and metrics (see the module docstring).

    `tracer_provider` / `meter_provider` default to the global ones.
    `capture_content` records prompts, completions, tool arguments and
    results (None: as `CAPTURE_CONTENT_ENV` says), each capped at
    `max_content_chars`. Pass it as `Runtime(observer=...)`.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        capture_content: bool | None = None,
        max_content_chars: int = MAX_CONTENT_CHARS,
    ) -> None:
        self.tracer = trace.get_tracer("taskloom", tracer_provider=tracer_provider)
        meter = metrics.get_meter("taskloom", meter_provider=meter_provider)
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS),
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        if capture_content is None:
            capture_content = os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"
        self.capture_content = capture_content
        self.max_content_chars = max_content_chars

    def run(self, info: RunInfo) -> _RunSpan:
        """The watch of a run that starts now: its `invoke_agent` span."""
        return _RunSpan(self, info)

    def current_traceparent(self) -> str | None:
        """The W3C `traceparent` of the current span (None outside any)."""
        return _traceparent()

    @contextmanager
    def continue_trace(self, traceparent: str | None) -> Iterator[None]:
        """A block whose spans are children of the span `traceparent` names."""
        if not traceparent:
            yield
            return
        token = otel_context.attach(_W3C.extract({"traceparent": traceparent}))
        try:
            yield
        finally:
            otel_context.detach(token)

    def queued(self, operation: str, session_id: str) -> _QueueSpan:
        """The `{operation} queued run` span of a host's `submit` or `wait`."""
        return _QueueSpan(self, operation, session_id)

    def content(self, value: list[dict[str, Any]]) -> str:
        """A content attribute's value: JSON, capped."""
        return capped_json(value, self.max_content_chars)


def error_type(exc: BaseException) -> str:
    """`error.type` of a failure: an HTTP status, `timeout`, or a class name."""
    if isinstance(exc, EndRun):
        status = exc.end.status
        return "timeout" if status is RunStatus.DEADLINE else status.value
    if isinstance(exc, ProviderError) and exc.status is not None:
        return str(exc.status)
    if isinstance(exc, TimeoutError):
        return "timeout"
    return type(exc).__qualname__


def _failed(span: Span, kind: str) -> None:
    span.set_attribute("error.type", kind)
    # The type, not the message: an error's text may quote what it was sent.
    span.set_status(Status(StatusCode.ERROR, kind))


def _traceparent(span: Span | None = None) -> str | None:
    """The W3C `traceparent` of `span` (else of the current span); None if invalid."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, None if span is None else trace.set_span_in_context(span))
    return carrier.get("traceparent")


def _links(traceparent: str | None, why: str = "resumes") -> list[Link]:
    if not traceparent:
        return []
    parked = trace.get_current_span(_W3C.extract({"traceparent": traceparent}))
    ctx = parked.get_span_context()
    return [Link(ctx, {"taskloom.link": why})] if ctx.is_valid else []


class _Active:
    """A span made current for a block (`with`), ended when the block ends."""

    __slots__ = ("_token", "span")

    span: Span

    def __enter__(self) -> Self:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        otel_context.detach(self._token)
        if exc is not None:
            _failed(self.span, error_type(exc))
        self.span.end()


class _QueueSpan(_Active):
    """A host's `submit` (PRODUCER, parent of the worker's run) or `wait` (linked to the run)."""

    __slots__ = ()

    def __init__(self, obs: GenAIObserver, operation: str, session_id: str) -> None:
        self.span = obs.tracer.start_span(
            f"{operation} queued run",
            kind=SpanKind.PRODUCER if operation == "submit" else SpanKind.INTERNAL,
            attributes={
                "gen_ai.conversation.id": session_id,
                "taskloom.queue.operation": operation,
            },
        )

    def ran(self, traceparent: str | None) -> None:
        """Link to the run span `traceparent` names."""
        for link in _links(traceparent, "waited_on"):
            self.span.add_link(link.context, link.attributes)


class _RunSpan(_Active):
    __slots__ = ("_obs", "_session_id", "_traced_model")

    def __init__(self, obs: GenAIObserver, info: RunInfo) -> None:
        agent = info.agent
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent.name,
            "gen_ai.agent.id": agent_id(agent),
            "gen_ai.conversation.id": info.session_id,
            "taskloom.run.id": info.run_id,
            "taskloom.run.resume": info.resume,
        }
        description = getattr(agent, "description", "")
        if isinstance(description, str) and description:
            attributes["gen_ai.agent.description"] = description
        if obs.capture_content and agent.instructions:
            instructions = [{"type": "text", "content": agent.instructions}]
            attributes["gen_ai.system_instructions"] = obs.content(instructions)
        self._obs = obs
        self._session_id = info.session_id
        self._traced_model = False
        self.span = obs.tracer.start_span(
            f"invoke_agent {agent.name}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=_links(info.resumes),
        )

    @property
    def traceparent(self) -> str | None:
        """The run span's W3C `traceparent` (None when not sampled in)."""
        return _traceparent(self.span)

    def model_call(self, model: Model, request: ModelRequest, *, streamed: bool) -> _ChatSpan:
        """The `chat {model}` span of one model request."""
        if not self._traced_model:
            # The agent's model is known for sure only once the run asks it.
            self._traced_model = True
            self.span.set_attribute("gen_ai.provider.name", provider_name(model.provider))
            self.span.set_attribute("gen_ai.request.model", model.name)
        return _ChatSpan(self._obs, self._session_id, model, request, streamed)

    def tool_call(self, call: ToolCall, tool: Tool | None) -> _ToolSpan:
        """The `execute_tool {tool}` span of one tool call."""
        return _ToolSpan(self._obs, call, tool)

    def finished(self, result: RunResult) -> None:
        """Status, counts and usage (its children's included) of the ended run."""
        usage = result.usage
        span = self.span
        span.set_attributes(
            {
                "taskloom.run.status": result.status.value,
                "taskloom.run.rounds": result.rounds,
                "taskloom.run.model_requests": result.model_requests,
                "taskloom.run.tool_calls": result.tool_calls,
                "taskloom.run.transport_retries": result.transport_retries,
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
            }
        )
        if result.status is RunStatus.FAILED:
            _failed(span, RunStatus.FAILED.value)


class _ChatSpan(_Active):
    __slots__ = ("_metric_attributes", "_obs", "_provider", "_started")

    def __init__(
        self,
        obs: GenAIObserver,
        session_id: str,
        model: Model,
        request: ModelRequest,
        streamed: bool,
    ) -> None:
        provider = provider_name(model.provider)
        common: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model.name,
        }
        base_url = getattr(model, "base_url", None)
        server = server_of(base_url) if isinstance(base_url, str) else None
        if server is not None:
            common["server.address"], common["server.port"] = server
        attributes: dict[str, AttributeValue] = {
            **common,
            "gen_ai.conversation.id": session_id,
            "gen_ai.request.stream": streamed,
            "gen_ai.output.type": "json" if request.output_schema is not None else "text",
            **_settings(request),
        }
        if obs.capture_content:
            if request.system:
                instructions = [{"type": "text", "content": request.system}]
                attributes["gen_ai.system_instructions"] = obs.content(instructions)
            sent = [{"role": m.role, "parts": message_parts(m)} for m in request.messages]
            attributes["gen_ai.input.messages"] = obs.content(sent)
        self._obs = obs
        self._provider = model.provider
        self._metric_attributes = common
        self._started = time.monotonic()
        self.span = obs.tracer.start_span(
            f"chat {model.name}", kind=SpanKind.CLIENT, attributes=attributes
        )

    def retrying(self, attempt: int, delay: float, error: BaseException) -> None:
        """A failed attempt, as a `taskloom.retry` event: its status and the wait."""
        event: dict[str, AttributeValue] = {
            "error.type": error_type(error),
            "taskloom.retry.attempt": attempt,
            "taskloom.retry.delay": delay,
        }
        status = getattr(error, "status", None)
        if isinstance(status, int):
            event["http.response.status_code"] = status
        self.span.add_event("taskloom.retry", event)

    def responded(self, response: ModelResponse) -> None:
        """The response's model, id, finish reason and usage (and content, if asked)."""
        usage = response.usage
        attributes: dict[str, AttributeValue] = {
            "gen_ai.response.finish_reasons": [finish_reason(str(response.stop_reason))],
            "gen_ai.usage.input_tokens": input_tokens(usage, self._provider),
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
            "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
        }
        if usage.reasoning_tokens:
            attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
        if response.model:
            attributes["gen_ai.response.model"] = response.model
            self._metric_attributes = {
                **self._metric_attributes,
                "gen_ai.response.model": response.model,
            }
        if response.response_id:
            attributes["gen_ai.response.id"] = response.response_id
        if self._obs.capture_content:
            message = response.message
            reason = finish_reason(str(response.stop_reason))
            got = [{"role": message.role, "parts": message_parts(message), "finish_reason": reason}]
            attributes["gen_ai.output.messages"] = self._obs.content(got)
        self.span.set_attributes(attributes)
        record = self._obs.token_usage.record
        record(
            attributes["gen_ai.usage.input_tokens"],  # type: ignore[arg-type]
            {**self._metric_attributes, "gen_ai.token.type": "input"},
        )
        record(usage.output_tokens, {**self._metric_attributes, "gen_ai.token.type": "output"})

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        attributes = self._metric_attributes
        if exc is not None:
            attributes = {**attributes, "error.type": error_type(exc)}
        self._obs.duration.record(time.monotonic() - self._started, attributes)
        super().__exit__(exc_type, exc, tb)


def _settings(request: ModelRequest) -> Mapping[str, AttributeValue]:
    s = request.settings
    out: dict[str, AttributeValue] = {}
    if s.temperature is not None:
        out["gen_ai.request.temperature"] = s.temperature
    if s.top_p is not None:
        out["gen_ai.request.top_p"] = s.top_p
    if s.max_tokens is not None:
        out["gen_ai.request.max_tokens"] = s.max_tokens
    if s.stop:
        out["gen_ai.request.stop_sequences"] = list(s.stop)
    return out


class _ToolSpan(_Active):
    __slots__ = ("_obs",)

    def __init__(self, obs: GenAIObserver, call: ToolCall, tool: Tool | None) -> None:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        if tool is not None and tool.description:
            attributes["gen_ai.tool.description"] = capped(tool.description, 1024)
        if obs.capture_content:
            arguments = (
                call.raw_arguments
                if call.raw_arguments is not None
                else json.dumps(call.arguments, ensure_ascii=False, default=str)
            )
            attributes["gen_ai.tool.call.arguments"] = capped(arguments, obs.max_content_chars)
        self._obs = obs
        self.span = obs.tracer.start_span(
            f"execute_tool {call.name}", kind=SpanKind.INTERNAL, attributes=attributes
        )

    def returned(self, output: ToolOutput) -> None:
        """The call's result: an in-band error fails this span, not the run's."""
        if output.is_error:
            _failed(self.span, "tool_error")
        if self._obs.capture_content:
            self.span.set_attribute(
                "gen_ai.tool.call.result", capped(output.content, self._obs.max_content_chars)
            )
