"""In-memory OpenTelemetry providers for the tracing tests, and span helpers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from taskloom import Runtime
from taskloom.tracing import GenAIObserver


@dataclass
class Traced:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def observer(self, **options: Any) -> GenAIObserver:
        return GenAIObserver(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **options
        )

    def runtime(self, **options: Any) -> Runtime:
        return Runtime(observer=self.observer(**options))

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name.startswith(prefix)]

    def histogram(self, name: str) -> list[HistogramDataPoint]:
        data = self.reader.get_metrics_data()
        assert data is not None
        points: list[HistogramDataPoint] = []
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        points += list(metric.data.data_points)  # type: ignore[arg-type]
        return points


def in_memory() -> Iterator[Traced]:
    """Providers of a test's own (a fixture yields from this)."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Traced(exporter, reader, tracer_provider, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.trace_id


def overlap(a: ReadableSpan, b: ReadableSpan) -> bool:
    assert a.start_time and a.end_time and b.start_time and b.end_time
    return a.start_time < b.end_time and b.start_time < a.end_time


def everything_exported(t: Traced) -> str:
    """Every span (attributes, events, links, status) and metric point, as text."""
    texts = [s.to_json() for s in t.spans]
    data = t.reader.get_metrics_data()
    if data is not None:
        texts.append(data.to_json())
    return "\n".join(texts)
