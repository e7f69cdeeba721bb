"""A runtime's default observer: traces while a global tracer provider is configured.

Deciding costs nearly nothing: while the process has not imported
`opentelemetry.trace` (nor names `OTEL_PYTHON_TRACER_PROVIDER`), no provider
can be configured. Otherwise each run checks whether the global provider is
still the API's placeholder; the first run that finds a real one builds the
`GenAIObserver` every later run shares.
"""

from __future__ import annotations

import importlib
import os
import sys
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from ..loop.ports import NO_OBSERVER, QueueWatch, RunInfo, RunObserver, RunWatch

if TYPE_CHECKING:
    from ._otel import GenAIObserver

_PROVIDER_ENV = "OTEL_PYTHON_TRACER_PROVIDER"


class WhenConfigured:
    """The observer of a runtime given none: a `GenAIObserver` while a global
    tracer provider is configured, else nothing (see the module docstring).

    `trace_content` records content whatever the environment says.
    """

    __slots__ = ("_named_provider", "_observer", "_trace_content")

    def __init__(self, trace_content: bool = False) -> None:
        self._trace_content = trace_content
        self._observer: GenAIObserver | None = None
        # Read once: the variable configures the process at its start.
        self._named_provider = _PROVIDER_ENV in os.environ

    def _active(self) -> RunObserver:
        api = sys.modules.get("opentelemetry.trace")
        if api is None:
            if not self._named_provider:
                return NO_OBSERVER
            api = importlib.import_module("opentelemetry.trace")
        if isinstance(api.get_tracer_provider(), api.ProxyTracerProvider):
            return NO_OBSERVER
        if self._observer is None:
            from ._otel import GenAIObserver

            self._observer = GenAIObserver(capture_content=self._trace_content or None)
        return self._observer

    def run(self, info: RunInfo) -> RunWatch:
        """The watch of a run that starts now (unobserved without a provider)."""
        return self._active().run(info)

    def current_traceparent(self) -> str | None:
        """The current span's `traceparent`, when tracing."""
        return self._active().current_traceparent()

    def continue_trace(self, traceparent: str | None) -> AbstractContextManager[object]:
        """A block continuing the trace `traceparent` names, when tracing."""
        return self._active().continue_trace(traceparent)

    def queued(self, operation: str, session_id: str) -> QueueWatch:
        """The watch of a host's `submit` or `wait`, when tracing."""
        return self._active().queued(operation, session_id)
