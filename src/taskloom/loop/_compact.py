"""Compaction: long sessions keep their whole log, and send a shorter view
(docs/concepts/compaction.md).

The cut happens only between rounds and never separates a turn from its
tool results. The size estimate needs no tokenizer: the last reported input
tokens plus what was appended since, at the ratio that exact count gave.
Compaction never makes a request larger: when a summary would not help, or
the summarizer fails or runs out of time, the older part is left out instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import entries as log_entries
from ..errors import ConfigurationError
from ..log import SessionLog, message_chars, summary_chars
from ..messages import Message
from ..models import Model, ModelRequest, ModelSettings, known_context_window
from ._result import EndRun

if TYPE_CHECKING:
    from ._ask import ModelAsker
    from ._scope import RunState

SUMMARY_PROMPT = """\
You compact the earlier part of a conversation between a user, an AI agent and \
its tools, so the agent can continue with less context. Write a summary that \
keeps everything the agent needs to go on: the user's goals and instructions \
(verbatim where exact wording matters), decisions made, facts and results \
learned from tools (names, numbers, identifiers, paths, URLs), work done and \
work still open, and any commitments made to the user. Drop pleasantries and \
repetition. If an earlier summary is included, fold it in. Write plain text, \
in the conversation's language, without preamble."""
"""The fixed system prompt of the summarizer call."""

SUMMARY_SHARE = 0.25
"""The most of a run's remaining time (until its deadline) a summary may
take: a summarizer that hangs then leaves the run three quarters of its time,
to go on from a cut without a summary."""

DEFAULT_CHARS_PER_TOKEN = 4.0
# A ratio measured on a short request is dominated by the provider's fixed
# overhead (roles, tool definitions): keep it within what text really has.
_RATIO_RANGE = (3.0, 5.0)


@dataclass(frozen=True, slots=True)
class Compaction:
    """When and how an agent's long sessions are compacted.

    `threshold` is the share of the model's context window an estimated
    request may reach before the older part of the view is summarized;
    `keep_recent` how many of the latest messages always stay verbatim (the
    cut moves earlier to keep a turn with its results); `summarizer` the
    model that writes the summary (a `Model` or spec; None: the agent's own
    model). A summary has at most `summary_tokens` tokens, and at most half
    of what the threshold allows of the window (so the recent part has room
    to grow before the next compaction); a longer one is cut to that budget
    and says so. A summarizer that has not answered after `summary_timeout`
    seconds (None: no bound of its own), or in a run with a deadline after
    `SUMMARY_SHARE` (a quarter) of the time the run had left, whichever comes
    first, is given up on, as one that fails: the older part is left out of
    the view instead, and the run goes on. The window comes from
    `ModelSettings(context_window=...)`, else from the table of well-known
    models; without either, only a provider's overflow error compacts.
    """

    threshold: float = 0.8
    keep_recent: int = 6
    summarizer: Model | str | None = None
    summary_tokens: int = 1024
    summary_timeout: float | None = 120.0

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigurationError(
                f"Compaction threshold must be in (0, 1], not {self.threshold!r}"
            )
        if self.keep_recent < 1:
            raise ConfigurationError(f"Compaction keep_recent must be >= 1, not {self.keep_recent}")
        if self.summary_tokens < 1:
            raise ConfigurationError("Compaction summary_tokens must be >= 1")
        if self.summary_timeout is not None and not self.summary_timeout > 0:
            raise ConfigurationError(
                f"Compaction summary_timeout must be > 0 seconds or None, not {self.summary_timeout!r}"
            )

    def summary_budget(self, window: int | None) -> int:
        """The most tokens a summary may take in a model with this `window`
        (None: unknown): `summary_tokens`, and at most half of what the
        threshold allows of the window."""
        if window is None:
            return self.summary_tokens
        return max(1, min(self.summary_tokens, int(window * self.threshold / 2)))


class ContextEstimate:
    """The size in tokens of the next request, from the last exact count."""

    __slots__ = ("chars", "ratio", "tokens")

    def __init__(self) -> None:
        self.ratio = DEFAULT_CHARS_PER_TOKEN
        self.tokens: int | None = None
        self.chars = 0

    def observe(self, chars: int, input_tokens: int) -> None:
        """A request of `chars` characters was counted as `input_tokens` by the provider."""
        if input_tokens > 0 and chars > 0:
            low, high = _RATIO_RANGE
            self.ratio = min(high, max(low, chars / input_tokens))
            self.tokens = input_tokens
            self.chars = chars

    def estimate(self, chars: int) -> int:
        """Tokens of a request of `chars` characters."""
        if self.tokens is None or chars < self.chars:
            return int(chars / self.ratio) + 1
        return self.tokens + int((chars - self.chars) / self.ratio)


def _cut_allowed(messages: Sequence[Message], positions: Sequence[int], i: int) -> bool:
    if i <= 0 or i >= len(messages):
        return False
    if messages[i].role == "tool" or positions[i] == positions[i - 1]:
        return False  # a tool result goes with its turn; one entry is never split
    before = messages[i - 1]
    return not (before.role == "assistant" and before.tool_calls)


def cut_index(log: SessionLog, keep_recent: int, to_fit: bool = False) -> int | None:
    """Where to cut the view: messages before the index are summarized.

    The latest allowed cut that keeps at least `keep_recent` messages; when
    there is none and `to_fit` (the provider refused the request), the latest
    allowed cut at all, keeping as little as one turn. None: nothing can be cut.
    """
    messages, positions = log.messages, log.positions
    start = log.view_start
    for i in range(len(messages) - keep_recent, start, -1):
        if _cut_allowed(messages, positions, i):
            return i
    if to_fit:
        for i in range(len(messages) - 1, len(messages) - keep_recent, -1):
            if i > start and _cut_allowed(messages, positions, i):
                return i
    return None


def render_for_summary(
    messages: Sequence[Message], previous: str | None, limit: int | None = None
) -> str:
    """The older part of the conversation as text for the summarizer.

    Beyond `limit` characters, the oldest lines are left out (the summary of
    what came before them, if any, is kept).
    """
    lines: list[str] = []
    for m in messages:
        if m.role == "tool":
            for r in m.results:
                tag = "tool error" if r.is_error else "tool result"
                lines.append(f"[{tag} {r.tool_name or r.tool_call_id}] {r.content}")
            continue
        text = m.text
        if text:
            lines.append(f"[{m.role}] {text}")
        for call in m.tool_calls:
            args = call.raw_arguments if call.raw_arguments is not None else str(call.arguments)
            lines.append(f"[{m.role} calls] {call.name}({args})")
    body = "\n".join(lines)
    if limit is not None and len(body) > limit:
        body = "[... the oldest part was too long to show ...]\n" + body[-limit:]
    if previous:
        return f"[Earlier summary]\n{previous}\n\n[Conversation since]\n{body}"
    return body


def fit_text(text: str, limit: int, marker: str) -> str:
    """`text` if it has at most `limit` characters, else its beginning with
    `marker` after it, `limit` characters in all (the beginning alone when
    even the marker does not fit)."""
    if len(text) <= limit:
        return text
    room = limit - len(marker) - 1
    if room <= 0:
        return text[:limit]
    return f"{text[:room].rstrip()}\n{marker}"[:limit]


def with_note(previous: str, note: str, limit: int) -> str:
    """An earlier summary with `note` after it, at most `limit` characters:
    the summary is cut to make room for the note."""
    room = limit - len(note) - 2
    if not previous or room <= 0:
        return fit_text(note, limit, "[...]")
    return f"{fit_text(previous, room, '[...]')}\n\n{note}"


class Compactor:
    """A run's compaction under `policy`: decides at each boundary and
    compacts when needed."""

    __slots__ = ("_asker", "_instructions", "_run", "estimate", "hint", "policy", "tools_chars")

    def __init__(self, policy: Compaction, run: RunState, asker: ModelAsker) -> None:
        self.policy = policy
        self._instructions = run.agent.instructions or ""
        self._run = run
        self._asker = asker
        self.estimate = ContextEstimate()
        # "now": a strategy asked for it; "veto": not at this boundary.
        self.hint: str | None = None
        self.tools_chars: int | None = None

    def window(self) -> int | None:
        """The model's context window in tokens, if known."""
        models = self._run.ports.models
        window = models.settings.context_window
        if window is not None:
            return window
        return known_context_window(models.model.name)

    def request_chars(self, extra: str = "") -> int:
        """Characters of the next request: instructions, tools, the view."""
        if self.tools_chars is None:
            self.tools_chars = sum(
                len(t.name) + len(t.description) + len(str(t.input_schema))
                for t in self._run.ports.tools.tool_specs
            )
        log = self._run.log
        return len(self._instructions) + self.tools_chars + log.view_chars() + len(extra)

    def tokens(self, extra: str = "") -> int:
        """The estimated size in tokens of the next request."""
        return self.estimate.estimate(self.request_chars(extra))

    async def before_request(self, extra: str = "") -> None:
        """Compact now if the policy, a strategy or the size says so."""
        policy = self.policy
        hint, self.hint = self.hint, None
        if hint == "veto":
            return
        if hint == "now":
            await self.compact()
            return
        window = self.window()
        if window is None:
            return
        if self.tokens(extra) > policy.threshold * window:
            await self.compact()

    async def compact(self) -> bool:
        """Summarize the older part of the view, keeping the policy's recent
        messages; False if nothing could be cut.

        The request it leaves is never larger than before: a summary that
        would not make it smaller is not used, and the older part is left out
        of the view instead, as when the summarizer fails.
        """
        return await self._compact(cut_index(self._run.log, self.policy.keep_recent))

    async def compact_to_fit(self) -> bool:
        """`compact` for a request the provider refused as too long: when the
        policy's recent messages leave nothing to cut, cut later, keeping as
        little as one turn."""
        return await self._compact(cut_index(self._run.log, self.policy.keep_recent, to_fit=True))

    async def _compact(self, cut: int | None) -> bool:
        if cut is None:
            return False
        journal = self._run.ports.journal
        scope = self._run.scope
        log = self._run.log
        policy = self.policy
        before_chars = self.request_chars()
        before = self.estimate.estimate(before_chars)
        window = self.window()
        scope.event("CompactionStarted", run_id=scope.run_id, tokens=before, window=window)
        older = log.messages[log.view_start : cut]
        previous = log.compaction.summary if log.compaction is not None else None
        # The summarizer's own request must fit: leave it half of the window.
        limit = int(window * self.estimate.ratio * 0.5) if window else None
        text = render_for_summary(older, previous, limit)
        up_to = log.positions[cut - 1]
        budget = policy.summary_budget(window)
        cap = int(budget * self.estimate.ratio)
        method, note, failure = "summary", None, None
        try:
            written = await self._summarize(text, budget)
        except (asyncio.CancelledError, EndRun):
            raise
        except Exception as exc:
            failure = f"the summarizer failed ({type(exc).__name__}: {str(exc)[:200]})"
            written = ""
        # Everything the request holds besides the summary, after the cut.
        kept = (
            len(self._instructions)
            + (self.tools_chars or 0)
            + sum(message_chars(m) for m in log.messages[cut:])
        )
        summary = fit_text(written, cap, f"[... cut to its budget of {budget} tokens]")
        if failure is None:
            if len(summary) < len(written):
                note = f"the summary was cut from {len(written)} characters to {len(summary)}"
            if kept + summary_chars(summary) >= before_chars:
                failure = (
                    f"a summary of {len(summary)} characters would not have made "
                    "the request smaller"
                )
        if failure is not None:
            # Nothing is lost: the log keeps the messages; the view drops them.
            method = "dropped"
            note = f"{failure}; {len(older)} oldest messages were left out of the view"
            summary = with_note(previous or "", f"[{note}]", cap)
            if kept + summary_chars(summary) >= before_chars:
                # No room to say so in the view: the entry's note still does.
                summary = fit_text(previous or "", cap, "[...]")
        after_chars = kept + summary_chars(summary)
        after = self.estimate.estimate(after_chars)
        await journal.record(
            log_entries.CompactionEntry(summary, up_to, method, before, after, note), scope.run_id
        )
        # The last exact count described the view before the cut.
        self.estimate.tokens = None
        scope.event(
            "CompactionFinished",
            run_id=scope.run_id,
            tokens_before=before,
            tokens_after=after,
            method=method,
            up_to=up_to,
        )
        return True

    async def _summarize(self, text: str, budget: int) -> str:
        models = self._run.ports.models
        policy = self.policy
        summarizer = policy.summarizer
        model = models.model if summarizer is None else models.resolve_model(summarizer)
        request = ModelRequest(
            messages=(Message.user(text),),
            system=SUMMARY_PROMPT,
            settings=ModelSettings(max_tokens=budget),
        )
        timeout, why = policy.summary_timeout, ""
        remaining = self._run.controls.remaining
        if remaining is not None:
            # A hung summarizer must not cost the whole run: the run goes on
            # from a cut without a summary, in the time still left.
            share = max(0.0, remaining) * SUMMARY_SHARE
            if timeout is None or share < timeout:
                timeout = share
                why = f" ({SUMMARY_SHARE:.0%} of the time the run had left)"
        try:
            async with asyncio.timeout(timeout) as scope:
                response = await self._asker.ask(model, request)
        except TimeoutError:
            if not scope.expired():
                raise  # the model's own, not ours
            raise TimeoutError(f"no answer within {timeout:.3g} s{why}") from None
        summary = response.message.text.strip()
        if not summary:
            raise ValueError("the summarizer returned no text")
        return summary
