"""Rendering a run's events in the terminal as they happen (rich)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..events import (
    ApprovalRequested,
    Event,
    ModelRequestStarted,
    NoticeDelivered,
    RetryAttempt,
    RunFinished,
    SubagentFinished,
    SubagentStarted,
    TextDelta,
    ThinkingDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolProgress,
)
from ..results import RunResult

__all__ = ["EventPrinter", "usage_table"]

_LANE_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red")


def _args(arguments: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return text if len(text) <= 80 else text[:77] + "..."


class EventPrinter:
    """Prints events line by line; assistant text streams inline.

    Child agents' events get a coloured lane prefix named after their origin.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self._in_text = False
        self._lanes: dict[str, str] = {}
        # Keyed by origin too: call ids repeat across child sessions.
        self._calls: dict[tuple[str, str], str] = {}

    def note(self, markup: str, origin: str = "") -> None:
        """Print a line of the host's own (rich markup), between events."""
        self._line(origin, Text.from_markup(markup))

    def _lane(self, origin: str) -> Text:
        if not origin:
            return Text("")
        style = self._lanes.setdefault(origin, _LANE_STYLES[len(self._lanes) % len(_LANE_STYLES)])
        return Text(f"[{origin}] ", style=f"bold {style}")

    def _line(self, origin: str, body: Text | str) -> None:
        if self._in_text:
            self.console.print()
            self._in_text = False
        line = self._lane(origin)
        line.append(body if isinstance(body, Text) else Text(body))
        self.console.print(line)

    def __call__(self, event: Event) -> None:
        o = event.origin
        if isinstance(event, TextDelta):
            if not self._in_text:
                self.console.print(self._lane(o), end="")
                self._in_text = True
            self.console.print(event.text, end="", markup=False, highlight=False)
        elif isinstance(event, ThinkingDelta):
            pass
        elif isinstance(event, ModelRequestStarted):
            self._line(o, Text(f"· round {event.round}: asking {event.model}", style="dim"))
        elif isinstance(event, ToolCallStarted):
            label = f"{event.name}({_args(event.arguments)})"
            self._calls[(o, event.call_id)] = label
            self._line(o, Text.assemble(("→ ", "bold"), label))
        elif isinstance(event, ToolProgress):
            self._line(o, Text(f"  … {event.message}", style="dim"))
        elif isinstance(event, ToolCallFinished):
            mark, style = ("✗", "red") if event.is_error else ("✓", "green")
            content = event.content.replace("\n", " ")
            content = content if len(content) <= 90 else content[:87] + "..."
            label = self._calls.pop((o, event.call_id), event.name)
            self._line(
                o, Text.assemble((f"{mark} {label}", style), f" {event.duration:.2f}s → {content}")
            )
        elif isinstance(event, ApprovalRequested):
            self._line(
                o,
                Text(
                    f"⏸ {event.name}({_args(event.arguments)}) needs approval [{event.call_id}]",
                    style="bold yellow",
                ),
            )
        elif isinstance(event, NoticeDelivered):
            self._line(
                o,
                Text(
                    f"✉ delivered to the model: {event.text.splitlines()[0][:90]}", style="yellow"
                ),
            )
        elif isinstance(event, RetryAttempt):
            self._line(
                o,
                Text(
                    f"↻ retry {event.attempt} in {event.delay:.2f}s: {event.error}", style="yellow"
                ),
            )
        elif isinstance(event, SubagentStarted):
            self._line(
                o, Text(f"⇢ {event.name} started ({event.mode}): {event.task[:70]}", style="bold")
            )
        elif isinstance(event, SubagentFinished):
            self._line(o, Text(f"⇠ {event.name} {event.status}", style="bold"))
        elif isinstance(event, RunFinished) and self._in_text:
            self.console.print()
            self._in_text = False


def usage_table(result: RunResult, title: str = "usage") -> Table:
    """A small table of a result's status, counters and token usage."""
    table = Table(title=title, show_header=False, title_justify="left")
    u = result.usage
    rows = [
        ("status", result.status.value),
        ("rounds", str(result.rounds)),
        ("model requests", str(result.model_requests)),
        ("tool calls", str(result.tool_calls)),
        ("input tokens", str(u.input_tokens)),
        ("output tokens", str(u.output_tokens)),
    ]
    if u.cache_read_tokens or u.cache_write_tokens:
        rows.append(("cache read / write", f"{u.cache_read_tokens} / {u.cache_write_tokens}"))
    if u.reasoning_tokens:
        rows.append(("reasoning tokens", str(u.reasoning_tokens)))
    for k, v in rows:
        table.add_row(k, v)
    return table
