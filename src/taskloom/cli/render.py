"""What the CLI prints: run events as they happen, transcripts, calls
awaiting approval (rich).

Everything printed here that came from a store, a model or a tool goes
through `visible` first (see `taskloom.cli.text`), and into a `Text`, never
into rich markup.
"""

from __future__ import annotations

import asyncio
import errno
import json
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TextIO

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..events import (
    ApprovalRequested,
    EmptyAnswer,
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
from ..results import PendingCall, PendingInput, RunResult
from .text import visible

__all__ = [
    "EventPrinter",
    "Waiting",
    "approval_block",
    "command_line",
    "decide_line",
    "fold",
    "pending_summary",
    "terminal",
    "usage_table",
    "visible",
]

_LANE_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red")


def fold(text: str, limit: int) -> str:
    """`text` on one line of at most `limit` characters, control characters
    spelled out (never for what a human decides on)."""
    one = " ".join(visible(text).split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def _compact(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())


def approval_block(
    name: str, call_id: str, arguments: Mapping[str, Any], reason: str | None = None
) -> RenderableType:
    """A call awaiting a decision: name, id, why it was parked (when the rule
    could not say), then every argument as indented JSON, in full."""
    header = Text.assemble((visible(name), "bold yellow"), " ", (f"[{visible(call_id)}]", "dim"))
    body = visible(json.dumps(dict(arguments), indent=2, ensure_ascii=False, default=str))
    indented = "\n".join("    " + line for line in body.splitlines())
    parts: list[RenderableType] = [header]
    if reason:
        parts.append(Text(f"    parked because {visible(reason)}", style="yellow"))
    parts.append(Text(indented, overflow="fold"))
    return Group(*parts)


def question_block(question: PendingInput) -> RenderableType:
    """A question an MCP task asks: who asks, the message, the answer's fields (or the page)."""
    header = Text.assemble(("question", "bold yellow"), " ", (f"[{visible(question.id)}]", "dim"))
    parts: list[RenderableType] = [header]
    if question.source:
        parts.append(Text(f"    from {visible(question.source)}", style="dim"))
    parts.append(Text("    " + visible(question.message), overflow="fold"))
    if question.url:
        parts.append(Text(f"    visit {visible(question.url)}, then answer (no fields)"))
    schema = question.schema or {}
    required = set(schema.get("required") or ())
    for name, spec in (schema.get("properties") or {}).items():
        spec = spec if isinstance(spec, Mapping) else {}
        kind = str(spec.get("type", "string"))
        choices = [str(c) for c in spec.get("enum") or ()]
        choices += [str(o.get("const")) for o in spec.get("oneOf") or () if isinstance(o, Mapping)]
        said = f" one of {', '.join(choices)}" if choices else ""
        need = "" if name in required else " (optional)"
        title = spec.get("title") or spec.get("description") or ""
        about = f" — {visible(str(title))}" if title else ""
        parts.append(Text(f"    {visible(name)}: {kind}{said}{need}{about}", overflow="fold"))
    return Group(*parts)


def pending_summary(
    session_id: str, pending: Iterable[PendingCall], resume_flags: str, store_flags: str = ""
) -> Group:
    """The calls a run parked on, in full, with the commands that decide them
    (`store_flags`, as for `decide_line`) and resume the session
    (`resume_flags`: its store and how to rebuild its agent)."""
    parts: list[RenderableType] = []
    for call in pending:
        parts.append(Text("awaiting approval:", style="bold yellow"))
        parts.append(approval_block(call.name, call.id, call.arguments, call.reason))
        parts.append(decide_line(session_id, call.id, store_flags))
    if parts:
        again = shlex.join(["taskloom", "resume", session_id])
        parts.append(command_line(f"  then: {again}{' ' + resume_flags if resume_flags else ''}"))
    return Group(*parts)


def decide_line(session_id: str, call_id: str, store_flags: str = "") -> Text:
    """The command that decides a parked call, as a line to copy; `store_flags`
    name its store (`--store URL` or `--app MODULE:FACTORY`, empty for the default)."""
    command = shlex.join(["taskloom", "approve", session_id, visible(call_id)])
    where = f" {store_flags}" if store_flags else ""
    return command_line(f"  decide: {command}{where} (or add --deny)")


def command_line(text: str) -> Text:
    """A command to copy and run, never wrapped or cut (print it with
    `crop=False`): a line break inside it would break it."""
    return Text(text, no_wrap=True, overflow="ignore")


class _Terminal(Console):
    """rich's Console, but a closed standard output is left to `taskloom.cli.main`."""

    def on_broken_pipe(self) -> None:
        # rich would exit(1) here; main() ends the command as a closed pipe should.
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "standard output was closed")


def terminal() -> Console:
    """The console a command prints to (standard output)."""
    return _Terminal()


class Waiting:
    """`waiting for the model… 2.1s` on `stream`: drawn at `start()`, redrawn
    every `every` seconds while the event loop runs, wiped by `stop()` (with a
    carriage return and spaces, no escape codes)."""

    def __init__(
        self, stream: TextIO, clock: Callable[[], float] = time.monotonic, every: float = 0.1
    ) -> None:
        self.stream = stream
        self.clock = clock
        self.every = every
        self._since: float | None = None
        self._drawn = 0
        self._next: asyncio.TimerHandle | None = None

    @classmethod
    def on_stderr(cls) -> Waiting | None:
        """One on standard error when that is a terminal, else None (pipes get none)."""
        try:
            return cls(sys.stderr) if sys.stderr.isatty() else None
        except (AttributeError, ValueError):
            return None  # no stderr, or a closed one

    def start(self) -> None:
        """Start counting from now and draw the line."""
        self.stop()
        self._since = self.clock()
        self.draw()

    def draw(self) -> None:
        """Draw the line, and (in a running event loop) schedule the next drawing."""
        if self._since is None:
            return
        text = f"waiting for the model… {self.clock() - self._since:.1f}s"
        # A line wider than the terminal would wrap, and \r would wipe only its end.
        text = text[: max(shutil.get_terminal_size().columns - 1, 0)]
        self._write("\r" + text.ljust(self._drawn))
        self._drawn = len(text)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # drawn once; nothing to redraw it from
        self._next = loop.call_later(self.every, self.draw)

    def stop(self) -> None:
        """Wipe the line (if drawn) and stop redrawing it."""
        if self._next is not None:
            self._next.cancel()
            self._next = None
        self._since = None
        if self._drawn:
            self._write("\r" + " " * self._drawn + "\r")
            self._drawn = 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self._drawn = 0  # the terminal went away: nothing left to wipe


class EventPrinter:
    """Prints events line by line, assistant text inline, child agents' events
    behind a coloured lane prefix; with `waiting`, a line counts the seconds
    from each model request to the next event (`close()` wipes it)."""

    def __init__(self, console: Console, waiting: Waiting | None = None) -> None:
        self.console = console
        self.waiting = waiting
        self._in_text = False
        self._lanes: dict[str, str] = {}
        # Keyed by origin too: call ids repeat across child sessions.
        self._calls: dict[tuple[str, str], str] = {}

    def note(self, markup: str, origin: str = "") -> None:
        """Print a line of the host's own (rich markup), between events."""
        self.close()
        self._line(origin, Text.from_markup(markup))

    def close(self) -> None:
        """Wipe the waiting line, if one is drawn (before anything else is printed)."""
        if self.waiting is not None:
            self.waiting.stop()

    def _lane(self, origin: str) -> Text:
        if not origin:
            return Text("")
        style = self._lanes.setdefault(origin, _LANE_STYLES[len(self._lanes) % len(_LANE_STYLES)])
        return Text(f"[{visible(origin)}] ", style=f"bold {style}")

    def _end_text(self) -> None:
        if self._in_text:
            self.console.print()
            self._in_text = False

    def _line(self, origin: str, body: Text | str) -> None:
        self._end_text()
        line = self._lane(origin)
        line.append(body if isinstance(body, Text) else Text(body))
        self.console.print(line)

    def __call__(self, event: Event) -> None:
        o = event.origin
        if not isinstance(event, ThinkingDelta):
            self.close()  # thinking shows nothing: the model is still being waited on
        if isinstance(event, TextDelta):
            if not self._in_text:
                self.console.print(self._lane(o), end="")
                self._in_text = True
            self.console.print(visible(event.text), end="", markup=False, highlight=False)
        elif isinstance(event, ThinkingDelta):
            pass
        elif isinstance(event, ModelRequestStarted):
            asking = f"· round {event.round}: asking {visible(event.model)}"
            self._line(o, Text(asking, style="dim"))
            if self.waiting is not None:
                self.waiting.start()
        elif isinstance(event, ToolCallStarted):
            label = f"{visible(event.name)}({fold(_compact(event.arguments), 80)})"
            self._calls[(o, event.call_id)] = label
            self._line(o, Text.assemble(("→ ", "bold"), label))
        elif isinstance(event, ToolProgress):
            self._line(o, Text(f"  … {fold(event.message, 120)}", style="dim"))
        elif isinstance(event, ToolCallFinished):
            mark, style = ("✗", "red") if event.is_error else ("✓", "green")
            label = self._calls.pop((o, event.call_id), visible(event.name))
            took = f" {event.duration:.2f}s → {fold(event.content, 90)}"
            self._line(o, Text.assemble((f"{mark} {label}", style), took))
        elif isinstance(event, ApprovalRequested):
            self._line(o, Text("⏸ needs approval:", style="bold yellow"))
            self.console.print(
                approval_block(event.name, event.call_id, event.arguments, event.reason)
            )
        elif isinstance(event, NoticeDelivered):
            first = event.text.splitlines()[0] if event.text else ""
            self._line(o, Text(f"✉ delivered to the model: {fold(first, 120)}", style="yellow"))
        elif isinstance(event, RetryAttempt):
            retry = f"↻ retry {event.attempt} in {event.delay:.2f}s: {fold(event.error, 200)}"
            self._line(o, Text(retry, style="yellow"))
        elif isinstance(event, SubagentStarted):
            started = f"⇢ {visible(event.name)} started ({visible(event.mode)}): "
            self._line(o, Text(started + fold(event.task, 70), style="bold"))
        elif isinstance(event, SubagentFinished):
            self._line(o, Text(f"⇠ {visible(event.name)} {visible(event.status)}", style="bold"))
        elif isinstance(event, EmptyAnswer):
            empty = "∅ the model answered with nothing (no text, no tool calls)"
            self._line(o, Text(empty, style="yellow"))
        elif isinstance(event, RunFinished):
            self._end_text()


def usage_table(result: RunResult, title: str = "usage") -> Table:
    """A table of a result's status, counters and token usage (children's on rows of their own)."""
    table = Table(title=Text(visible(title)), show_header=False, title_justify="left")
    own, children = result.own_usage, result.children_usage
    rows = [
        ("status", result.status.value + (" (empty answer)" if result.empty_answer else "")),
        ("rounds (this agent)", str(result.rounds)),
        ("model requests (this agent)", str(result.model_requests)),
        ("tool calls (this agent)", str(result.tool_calls)),
        ("tokens in / out (this agent)", f"{own.input_tokens} / {own.output_tokens}"),
    ]
    if own.cache_read_tokens or own.cache_write_tokens:
        cached = f"{own.cache_read_tokens} / {own.cache_write_tokens}"
        rows.append(("cache read / write (this agent)", cached))
    if own.reasoning_tokens:
        rows.append(("reasoning tokens (this agent)", str(own.reasoning_tokens)))
    if children.requests or children.total_tokens:
        tokens = f"{children.input_tokens} / {children.output_tokens}"
        rows.append(("model requests (children)", str(children.requests)))
        rows.append(("tokens in / out (children)", tokens))
    left = result.budget_left
    if left is not None:
        rows.append(("budget left (the tree's)", str(left)))
    for k, v in rows:
        table.add_row(k, v)
    return table
