"""Tracing: OpenTelemetry GenAI spans and metrics for runs (the `otel` extra).

With a tracer provider configured, every run emits `invoke_agent {agent}`
with its `chat {model}` and `execute_tool {tool}` spans, and the
`gen_ai.client.*` metrics; a child's run nests under the delegating tool's
span, across processes too (`ChildSpec.traceparent`). Nothing is paid but a
check per run while no provider is configured. `GenAIObserver` is the
observer itself, for a runtime that should trace through providers of its
own (`Runtime(observer=GenAIObserver(tracer_provider=...))`).

Importing this package does not import opentelemetry; using `GenAIObserver`
does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._default import WhenConfigured

__all__ = ["GenAIObserver", "WhenConfigured"]

if TYPE_CHECKING:
    from ._otel import GenAIObserver

__getattr__ = lazy_exports(__name__, {"GenAIObserver": "taskloom.tracing._otel"})
