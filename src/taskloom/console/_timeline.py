"""A run's timeline, drawn by the server as SVG.

Times come from the entries' `created_at` (set by the store when each entry
landed). A model request spans from the entry before the assistant message
(what the request was built from) to the message itself; a turn's tool calls
span from their start record (or the assistant message) to the message that
carries their results. The log keeps no per-call timing of plain tools, so
calls of one batch share the batch's span; a call that ran a child takes the
child's own span (its start entry to its terminal entry). Calls of one turn
sit side by side in lanes of their own; a child's requests and calls nest in
lanes below, indented.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from html import escape

from ..entries import CallsStarted, Entry, MessageEntry, RunFinishedEntry, RunStartedEntry
from ..errors import SessionNotFound
from ._read import child_links, redact
from ._tree import LogCache, child_span

MAX_DEPTH = 3


@dataclass(frozen=True, slots=True)
class Lane:
    """A row of the picture."""

    label: str
    depth: int
    kind: str


@dataclass(frozen=True, slots=True)
class Bar:
    """Something that took time, in a lane."""

    lane: int
    start: float
    end: float
    kind: str
    label: str
    title: str
    href: str = ""


@dataclass(slots=True)
class Timeline:
    """Lanes, bars and round marks of one run of a session."""

    start: float
    end: float
    lanes: list[Lane] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    rounds: list[tuple[float, str]] = field(default_factory=list)
    by: str = ""


def run_spans(entries: list[Entry]) -> list[tuple[int, int]]:
    """(first, last) indexes into `entries` of each run, from its start entry
    to its end entry (or the log's end while it runs)."""
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for i, entry in enumerate(entries):
        payload = entry.payload
        if isinstance(payload, RunStartedEntry):
            if start is not None:
                spans.append((start, i - 1))
            start = i
        elif isinstance(payload, RunFinishedEntry) and start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(entries) - 1))
    return spans


async def build_timeline(
    cache: LogCache, session_id: str, run: int | None = None
) -> tuple[Timeline | None, int, int]:
    """The timeline of run `run` (0-based; default the last), the run index
    drawn and how many runs there are. None when the session never ran."""
    entries = await cache.entries(session_id)
    spans = run_spans(entries)
    if not spans:
        return None, 0, 0
    index = len(spans) - 1 if run is None or not 0 <= run < len(spans) else run
    first, last = spans[index]
    part = entries[first : last + 1]
    finished = isinstance(part[-1].payload, RunFinishedEntry)
    end = part[-1].created_at if finished else max(part[-1].created_at, time.time())
    timeline = Timeline(part[0].created_at, end)
    started = part[0].payload
    if isinstance(started, RunStartedEntry):
        timeline.by = redact(started.by)  # who ran it, when it said: a queue worker does
    meta = await cache.meta(session_id)
    await _lanes(cache, timeline, part, meta.agent or "session", 0, end)
    timeline.end = max([timeline.end] + [b.end for b in timeline.bars])
    return timeline, index, len(spans)


async def _lanes(
    cache: LogCache, timeline: Timeline, part: list[Entry], label: str, depth: int, end: float
) -> None:
    model_lane = len(timeline.lanes)
    timeline.lanes.append(Lane(f"{label} · model", depth, "model"))
    links = child_links(part)
    results_at: dict[str, float] = {}
    started_at: dict[int, float] = {}
    for entry in part:
        payload = entry.payload
        if isinstance(payload, MessageEntry):
            for r in payload.message.results:
                results_at.setdefault(r.tool_call_id, entry.created_at)
        elif isinstance(payload, CallsStarted):
            started_at.setdefault(payload.turn, entry.created_at)
    tool_lanes: list[int] = []
    nested: list[tuple[str, str, float]] = []
    round_no = 0
    for i, entry in enumerate(part):
        payload = entry.payload
        if not isinstance(payload, MessageEntry) or payload.message.role != "assistant":
            continue
        round_no += 1
        before = part[i - 1].created_at if i else entry.created_at
        asked = f"{label}: model request of round {round_no}"
        timeline.bars.append(
            Bar(model_lane, before, entry.created_at, "model", f"R{round_no}", asked)
        )
        if depth == 0:
            timeline.rounds.append((entry.created_at, f"R{round_no}"))
        for k, call in enumerate(payload.message.tool_calls):
            while len(tool_lanes) <= k:
                tool_lanes.append(len(timeline.lanes))
                timeline.lanes.append(Lane(f"{label} · tool {len(tool_lanes)}", depth, "tool"))
            start = started_at.get(entry.position, entry.created_at)
            stop = results_at.get(call.id, end)
            href, what = "", f"{call.name} [{call.id}]"
            for child in links.get(call.id, ()):
                try:
                    child_entries = await cache.entries(child.session_id)
                    meta = await cache.meta(child.session_id)
                except SessionNotFound:
                    continue  # deleted since: the link outlives it in the log
                c_start, c_end, _ = child_span(child_entries, meta.created_at)
                start, stop = c_start, c_end if c_end is not None else end
                href = child.session_id
                what += f" → child {child.name}"
                nested.append((child.session_id, child.name, end))
            timeline.bars.append(
                Bar(tool_lanes[k], start, max(stop, start), "tool", call.name, what, href)
            )
    if depth >= MAX_DEPTH:
        return
    for child_id, name, child_end in nested:
        child_entries = await cache.entries(child_id)
        if child_entries:
            await _lanes(
                cache, timeline, child_entries, f"{name}#{child_id[:8]}", depth + 1, child_end
            )


WIDTH = 960
LABELS = 230
LANE = 22
BAR = 14
TOP = 28


def _fmt(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def to_svg(timeline: Timeline) -> str:
    """The timeline as an inline SVG element (every text escaped)."""
    span = max(timeline.end - timeline.start, 1e-3)
    plot = WIDTH - LABELS - 12
    height = TOP + LANE * len(timeline.lanes) + 8

    def x(t: float) -> float:
        return LABELS + (t - timeline.start) / span * plot

    out = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="timeline of the run, {_fmt(span)}">'
    ]
    for n in range(5):
        t = timeline.start + span * n / 4
        tx = x(t)
        out.append(f'<line class="tick" x1="{tx:.1f}" y1="{TOP - 6}" x2="{tx:.1f}" y2="{height}"/>')
        anchor = "end" if n == 4 else "start"
        out.append(
            f'<text class="tick-label" x="{tx:.1f}" y="{TOP - 10}" text-anchor="{anchor}">'
            f"+{escape(_fmt(t - timeline.start))}</text>"
        )
    for t, label in timeline.rounds:
        rx = x(t)
        out.append(
            f'<line class="round" x1="{rx:.1f}" y1="{TOP}" x2="{rx:.1f}" y2="{height}"/>'
            f'<text class="round-label" x="{rx + 2:.1f}" y="{TOP + 9}">{escape(label)}</text>'
        )
    for i, lane in enumerate(timeline.lanes):
        y = TOP + i * LANE
        indent = 8 + lane.depth * 14
        out.append(
            f'<text class="lane-label lane-{escape(lane.kind)}" x="{indent}" y="{y + LANE - 7}">'
            f"{escape(lane.label[:40])}</text>"
        )
        out.append(
            f'<line class="lane" x1="{LABELS}" y1="{y + LANE}" x2="{WIDTH}" y2="{y + LANE}"/>'
        )
    for bar in timeline.bars:
        bx = x(bar.start)
        width = max(x(bar.end) - bx, 2.0)
        top = TOP + bar.lane * LANE + (LANE - BAR) / 2
        title = f"{bar.title}: {_fmt(bar.end - bar.start)}"
        rect = (
            f'<rect class="bar bar-{escape(bar.kind)}" data-kind="{escape(bar.kind)}" '
            f'data-lane="{bar.lane}" data-start="{bar.start - timeline.start:.4f}" '
            f'data-end="{bar.end - timeline.start:.4f}" x="{bx:.1f}" y="{top:.1f}" '
            f'width="{width:.1f}" height="{BAR}" rx="2"><title>{escape(title)}</title></rect>'
        )
        if width > 40:
            rect += (
                f'<text class="bar-label" x="{bx + 3:.1f}" y="{top + BAR - 3:.1f}">'
                f"{escape(bar.label[: int(width / 7)])}</text>"
            )
        if bar.href:
            rect = f'<a href="/sessions/{escape(bar.href)}">{rect}</a>'
        out.append(rect)
    out.append("</svg>")
    return "".join(out)
