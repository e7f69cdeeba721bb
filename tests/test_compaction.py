"""Compaction: long sessions keep their whole log and send a view that fits."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

import pytest

from taskloom import (
    Agent,
    Compaction,
    ContextWindowExceeded,
    ModelSettings,
    RunOptions,
    RunStatus,
    Runtime,
    tool,
)
from taskloom.entries import CompactionEntry, EntryKind
from taskloom.errors import ConfigurationError
from taskloom.events import CompactionFinished
from taskloom.log import summary_message
from taskloom.loop import SUMMARY_PROMPT, ContextEstimate, RoundContext, RoundDecision
from taskloom.messages import Message, TextBlock, ToolCall, ToolResult, Usage
from taskloom.models import FunctionModel, ModelRequest, known_context_window, reply
from taskloom.testing.fake_server import FakeServer

WINDOW = 2000
RESULT = "x" * 792 + " result"  # ~200 tokens
SUMMARY_HEADING = summary_message("").text.strip()
"""What the turn standing for the compacted part of a conversation starts with."""


def strict_tokens(request: ModelRequest) -> int:
    """The test's own exact count: 4 characters a token over everything sent."""
    chars = len(request.system or "")
    for spec in request.tools:
        chars += len(spec.name) + len(spec.description) + len(json.dumps(spec.input_schema))
    for m in request.messages:
        for b in m.blocks:
            if isinstance(b, TextBlock):
                chars += len(b.text)
            elif isinstance(b, ToolResult):
                chars += len(b.content)
            elif isinstance(b, ToolCall):
                chars += len(b.name) + len(json.dumps(b.arguments))
    return math.ceil(chars / 4)


def pairing_problems(messages: list[Message]) -> list[str]:
    """Orphan results, calls without results, or a broken turn in a request."""
    problems = []
    for i, m in enumerate(messages):
        if m.role == "tool":
            before = messages[i - 1] if i else None
            calls = {c.id for c in before.tool_calls} if before is not None else set()
            if (
                before is None
                or before.role != "assistant"
                or {r.tool_call_id for r in m.results} != calls
            ):
                problems.append(f"orphan results at {i}")
        followed = i + 1 < len(messages) and messages[i + 1].role == "tool"
        if m.role == "assistant" and m.tool_calls and i + 1 < len(messages) and not followed:
            problems.append(f"calls without results at {i}")
    return problems


@tool
def fetch(n: int) -> str:
    """Fetch page n."""
    return RESULT


class LongModel:
    """300 tool rounds, then an answer; summarizes when asked; checks every request."""

    def __init__(self, rounds: int = 300) -> None:
        self.rounds = rounds
        self.asked = 0
        self.summaries = 0
        self.largest = 0
        self.problems: list[str] = []
        self.saw_summary = False

    def __call__(self, request: ModelRequest) -> Any:
        tokens = strict_tokens(request)
        self.largest = max(self.largest, tokens)
        usage = Usage(tokens, 10)
        if request.system == SUMMARY_PROMPT:
            self.summaries += 1
            return reply(f"summary {self.summaries}: fetched pages so far", usage=usage)
        self.problems += pairing_problems(list(request.messages))
        if any(SUMMARY_HEADING in m.text for m in request.messages if m.role == "user"):
            self.saw_summary = True
        self.asked += 1
        if self.asked <= self.rounds:
            return reply(tool_calls=[("fetch", {"n": self.asked})], usage=usage)
        return reply("read them all", usage=usage)


async def test_three_hundred_rounds_fit_a_small_window_and_the_log_keeps_everything() -> None:
    model = LongModel()
    agent = Agent(
        "reader",
        FunctionModel(model),
        "Read every page.",
        tools=[fetch],
        settings=ModelSettings(context_window=WINDOW),
        compaction=Compaction(threshold=0.8, keep_recent=4),
    )
    runtime = Runtime()
    session = await runtime.create_session(agent)
    events: list[Any] = []
    # 300 rounds: past the default bound on rounds, lifted.
    unbounded = RunOptions(max_rounds=None)
    result = await session.run("Read pages 1 to 300.", emit=events.append, options=unbounded)
    assert result.status is RunStatus.COMPLETED and result.text == "read them all"
    assert model.largest <= WINDOW, model.largest  # by the test's exact count
    assert model.problems == []
    assert model.saw_summary and model.summaries > 10
    results = [r for m in await session.transcript() for r in m.results]
    assert len(results) == 300  # the log keeps every result
    compactions = [e.payload for e in await session.entries() if e.kind == EntryKind.COMPACTION]
    assert len(compactions) == model.summaries
    finished = [e for e in events if isinstance(e, CompactionFinished)]
    assert len(finished) == model.summaries
    assert all(e.tokens_after < e.tokens_before for e in finished)
    # The summarizer's usage is the run's too.
    assert result.usage.requests == model.asked + model.summaries


async def test_no_policy_means_no_compaction_and_the_whole_log_is_sent() -> None:
    model = LongModel(rounds=12)
    agent = Agent(
        "r", FunctionModel(model), tools=[fetch], settings=ModelSettings(context_window=WINDOW)
    )
    result = await agent.run("go")
    assert result.status is RunStatus.COMPLETED
    assert model.summaries == 0 and model.largest > WINDOW


@pytest.mark.parametrize("keep", range(1, 15))
async def test_a_cut_never_separates_a_turn_from_its_results(keep: int) -> None:
    # A request the provider refuses as too long is compacted as late as
    # needs be, keeping as little as one turn: never inside a turn.
    sent: list[list[Message]] = []

    def model(request: ModelRequest) -> Any:
        if request.system == SUMMARY_PROMPT:
            return reply("what was fetched")
        sent.append(list(request.messages))
        if len(sent) <= 5:
            return reply(tool_calls=[("fetch", {"n": len(sent)})])
        if len(sent) == 7:
            raise ContextWindowExceeded("prompt is too long", provider="test")
        return reply("done")

    agent = Agent("r", FunctionModel(model), tools=[fetch], compaction=Compaction(keep_recent=keep))
    session = await Runtime().create_session(agent)
    assert (await session.run("go")).text == "done"
    result = await session.run("again")
    assert result.status is RunStatus.COMPLETED and result.text == "done"
    assert len([e for e in await session.entries() if e.kind == EntryKind.COMPACTION]) == 1
    refused, retried = sent[-2:]
    kept = [m for m in retried if SUMMARY_HEADING not in m.text]
    assert len(refused) == 13 and 0 < len(kept) < len(refused)
    assert kept == refused[-len(kept) :] and pairing_problems(retried) == []


async def test_the_summarizer_reads_the_turns_and_the_last_summary_within_half_the_window() -> None:
    asked: list[str] = []

    def summarize(request: ModelRequest) -> Any:
        asked.append(request.messages[0].text)
        return reply(f"summary {len(asked)}: found x=42")

    model = LongModel(rounds=40)
    agent = Agent(
        "r",
        FunctionModel(model),
        tools=[fetch],
        settings=ModelSettings(context_window=WINDOW),
        compaction=Compaction(keep_recent=2, summarizer=FunctionModel(summarize)),
    )
    result = await agent.run("go")
    assert result.status is RunStatus.COMPLETED and len(asked) >= 2
    assert "fetch(" in asked[0] and RESULT in asked[0]
    for earlier, text in enumerate(asked[1:], start=1):
        assert f"summary {earlier}: found x=42" in text  # folded in, not lost
    # The summarizer's own request must fit: half the window, at the
    # provider's 4 characters a token, and a line saying what was left out.
    assert any("too long" in text for text in asked)
    assert max(len(text) for text in asked) < WINDOW * 4 // 2 + 200


def test_estimate_is_calibrated_by_the_last_exact_count() -> None:
    estimate = ContextEstimate()
    assert estimate.estimate(4000) == 1001  # 4 characters a token before any count
    estimate.observe(4000, 1250)  # this provider counts 3.2 characters a token
    assert estimate.estimate(5000) == 1250 + int(1000 / 3.2)
    estimate.observe(4000, 4000)  # 1 a token: overhead, not text; the ratio stays >= 3
    assert estimate.estimate(7000) == 4000 + 1000


def test_known_windows_by_family() -> None:
    assert known_context_window("gpt-4.1-mini-2025-04-14") == 1_047_576
    assert known_context_window("claude-sonnet-4-5") == 200_000
    assert known_context_window("my-own-model") is None


async def test_a_strategy_can_ask_for_compaction_or_veto_it() -> None:
    seen: list[tuple[int | None, int | None]] = []

    class Asks:
        async def on_round(self, ctx: RoundContext) -> RoundDecision:
            seen.append((ctx.context_tokens, ctx.context_window))
            return RoundDecision.proceed(compaction="now" if ctx.rounds_completed == 3 else "auto")

    model = LongModel(rounds=5)
    agent = Agent(
        "r",
        FunctionModel(model),
        tools=[fetch],
        settings=ModelSettings(context_window=100_000),
        compaction=Compaction(keep_recent=2),
    )
    result = await agent.run("go", options=RunOptions(strategy=Asks()))
    assert result.status is RunStatus.COMPLETED
    assert model.summaries == 1  # far under the threshold: only the strategy's ask
    assert all(tokens and window == 100_000 for tokens, window in seen)

    class Vetoes:
        async def on_round(self, ctx: RoundContext) -> RoundDecision:
            return RoundDecision.proceed(compaction="veto")

    model = LongModel(rounds=12)
    agent = agent.replace(model=FunctionModel(model), settings=ModelSettings(context_window=WINDOW))
    await agent.run("go", options=RunOptions(strategy=Vetoes()))
    assert model.summaries == 0 and model.largest > WINDOW


async def test_a_failing_summarizer_drops_the_oldest_turns_and_says_so() -> None:
    def broken(request: ModelRequest) -> Any:
        raise RuntimeError("summarizer down")

    model = LongModel(rounds=12)
    agent = Agent(
        "r",
        FunctionModel(model),
        tools=[fetch],
        settings=ModelSettings(context_window=WINDOW),
        compaction=Compaction(keep_recent=4, summarizer=FunctionModel(broken)),
    )
    runtime = Runtime()
    session = await runtime.create_session(agent)
    result = await session.run("go")
    assert result.status is RunStatus.COMPLETED
    entries = [e.payload for e in await session.entries() if e.kind == EntryKind.COMPACTION]
    assert entries and all(isinstance(e, CompactionEntry) for e in entries)
    first = entries[0]
    assert isinstance(first, CompactionEntry)
    assert first.method == "dropped" and "summarizer down" in (first.note or "")
    assert model.largest <= WINDOW


async def test_transcript_can_mark_where_compaction_happened() -> None:
    model = LongModel(rounds=10)
    agent = Agent(
        "r",
        FunctionModel(model),
        tools=[fetch],
        settings=ModelSettings(context_window=WINDOW),
        compaction=Compaction(keep_recent=4),
    )
    runtime = Runtime()
    session = await runtime.create_session(agent)
    await session.run("go")
    plain = await session.transcript()
    marked = await session.transcript(mark_compactions=True)
    markers = [m for m in marked if m.origin == "compaction"]
    assert len(marked) == len(plain) + len(markers) and markers
    assert all(SUMMARY_HEADING in m.text for m in markers)


# ---------------------------------------------------------------- overflow


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (
            "openai",
            {
                "error": {
                    "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
        ),
        (
            "anthropic",
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 210000 tokens > 200000 maximum",
                },
            },
        ),
    ],
)
async def test_a_provider_overflow_compacts_once_and_retries_once(
    kind: str, body: dict[str, Any]
) -> None:
    from taskloom.models import AnthropicModel, OpenAIChatModel

    async with FakeServer() as server:
        if kind == "openai":
            model: Any = OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="k")
        else:
            model = AnthropicModel("claude-test", base_url=server.anthropic_base_url, api_key="k")
        agent = Agent("o", model, compaction=Compaction(keep_recent=1))
        runtime = Runtime()
        session = await runtime.create_session(agent)
        server.script(FakeServer.reply("first answer"), FakeServer.reply("second answer"))
        await session.run("one")
        await session.run("two")
        server.script(
            FakeServer.error(400, body=body),
            FakeServer.reply("the summary"),
            FakeServer.reply("after compaction"),
        )
        result = await session.run("three")
        assert result.status is RunStatus.COMPLETED and result.text == "after compaction"
        compactions = [e for e in await session.entries() if e.kind == EntryKind.COMPACTION]
        assert len(compactions) == 1
        # Still too long after compacting: the run fails and says what to change.
        server.script(
            FakeServer.error(400, body=body),
            FakeServer.reply("another summary"),
            FakeServer.error(400, body=body),
        )
        failed = await session.run("four")
        assert failed.status is RunStatus.FAILED
        assert "does not fit" in (failed.error or "") and "keep_recent" in (failed.error or "")
        # Without a policy the provider's error reaches the caller, as any provider error.
        bare = await runtime.create_session(agent.replace(compaction=None))
        server.script(FakeServer.error(400, body=body))
        with pytest.raises(ContextWindowExceeded):
            await bare.run("too long")


async def test_sessions_show_marks_where_compaction_happened(tmp_path: Any) -> None:
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'c.db'}"
    model = LongModel(rounds=10)
    agent = Agent(
        "r",
        FunctionModel(model),
        tools=[fetch],
        settings=ModelSettings(context_window=WINDOW),
        compaction=Compaction(keep_recent=4),
    )
    async with Runtime(store=url) as runtime:
        session = await runtime.create_session(agent)
        await session.run("go")
    shown = subprocess.run(  # noqa: ASYNC221 - the CLI is the thing under test
        [sys.executable, "-m", "taskloom", "sessions", "show", session.id, "--store", url],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", **_pythonpath()},
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("── compacted:") == model.summaries >= 1


def _pythonpath() -> dict[str, str]:
    import os

    value = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": value} if value else {}


# ---------------------------------------------------------------- summarizers that misbehave


def test_summary_timeout_must_be_positive() -> None:
    assert Compaction().summary_timeout > 0
    assert Compaction(summary_timeout=None).summary_timeout is None
    with pytest.raises(ConfigurationError):
        Compaction(summary_timeout=0)


async def test_a_summarizer_that_never_answers_times_out_and_the_oldest_turns_are_dropped() -> None:
    never = asyncio.Event()  # never set: the summarizer hangs

    async def hangs(request: ModelRequest) -> Any:
        await never.wait()

    model = LongModel(rounds=12)
    agent = Agent(
        "r",
        FunctionModel(model),
        tools=[fetch],
        settings=ModelSettings(context_window=WINDOW),
        compaction=Compaction(keep_recent=4, summarizer=FunctionModel(hangs), summary_timeout=0.1),
    )
    runtime = Runtime()
    session = await runtime.create_session(agent)
    started = time.monotonic()
    # The deadline only bounds the test: the run must end well before it.
    result = await session.run("go", options=RunOptions(deadline=60))
    assert result.status is RunStatus.COMPLETED, result.error
    assert time.monotonic() - started < 30
    entries = [e.payload for e in await session.entries() if e.kind == EntryKind.COMPACTION]
    assert entries and all(isinstance(e, CompactionEntry) for e in entries)
    first = entries[0]
    assert isinstance(first, CompactionEntry)
    assert first.method == "dropped" and "0.1" in (first.note or "")
    assert "oldest messages were left out" in first.summary
    assert model.largest <= WINDOW


def _request_chars(request: ModelRequest) -> int:
    """The characters of a request of text turns only: its instructions and messages."""
    return len(request.system or "") + sum(len(m.text) for m in request.messages)


def _largest_summary_chars(tokens: int) -> int:
    """The most characters `tokens` can stand for by the estimator's ratio."""
    estimate = ContextEstimate()
    estimate.observe(5_000_000, 1)  # as many characters a token as it ever takes
    return int(tokens * estimate.ratio)


async def test_an_oversized_summary_is_cut_to_its_budget_and_says_so() -> None:
    verbose = FunctionModel(lambda request: reply("s" * 160_000))
    model = LongModel(rounds=12)
    agent = Agent(
        "r",
        FunctionModel(model),
        tools=[fetch],
        settings=ModelSettings(context_window=WINDOW),
        compaction=Compaction(keep_recent=4, summarizer=verbose, summary_tokens=200),
    )
    runtime = Runtime()
    session = await runtime.create_session(agent)
    result = await session.run("go")
    assert result.status is RunStatus.COMPLETED
    entries = [e.payload for e in await session.entries() if e.kind == EntryKind.COMPACTION]
    summaries = [e for e in entries if isinstance(e, CompactionEntry) and e.method == "summary"]
    assert summaries
    for entry in summaries:
        assert len(entry.summary) <= _largest_summary_chars(200)
        assert "cut" in entry.summary and "cut" in (entry.note or "")
    # The summarizer is asked for no more than the budget either.
    assert {r.settings.max_tokens for r in verbose.requests} == {200}
    assert model.largest <= WINDOW


@pytest.mark.parametrize("summary_chars", [10, 300, 2_000, 8_000, 160_000])
@pytest.mark.parametrize("message_chars_each", [3, 150, 3_000])
async def test_compaction_never_makes_the_request_larger(
    summary_chars: int, message_chars_each: int
) -> None:
    sent: list[ModelRequest] = []

    def answer(request: ModelRequest) -> Any:
        sent.append(request)
        # No count of its own: the loop estimates 4 characters a token.
        return reply("m" * message_chars_each, usage=Usage(0, 1))

    instructions = "Be brief."
    window = int((len(instructions) + 6 * message_chars_each) / 4 / 0.8)  # ~6 messages
    summarizer = FunctionModel(lambda request: reply("s" * summary_chars))
    agent = Agent(
        "r",
        FunctionModel(answer),
        instructions,
        settings=ModelSettings(context_window=window),
        compaction=Compaction(keep_recent=2, summarizer=summarizer),
    )
    session = await Runtime().create_session(agent)
    finished: list[CompactionFinished] = []

    def emit(event: object) -> None:
        if isinstance(event, CompactionFinished):
            finished.append(event)

    compactions = 0
    for _ in range(12):  # the later ones compact on top of a summary
        finished.clear()
        last = sent[-1] if sent else None
        await session.run("m" * message_chars_each, emit=emit)
        if not finished:
            continue
        assert last is not None
        (compaction,) = finished
        # Before: the last request, its answer and this run's prompt.
        before = _request_chars(last) + 2 * message_chars_each
        after = _request_chars(sent[-1])
        assert after <= before, (before, after)
        # The estimate the loop decides by counts what the request holds.
        assert (compaction.tokens_before, compaction.tokens_after) == (
            int(before / 4) + 1,
            int(after / 4) + 1,
        )
        compactions += 1
    assert compactions >= 3


class ManyRounds:
    """Tool rounds with short results; summaries as long as the summarizer likes."""

    def __init__(self, rounds: int, summary: Any) -> None:
        self.rounds = rounds
        self.summary = summary
        self.asked = 0
        self.largest = 0

    def __call__(self, request: ModelRequest) -> Any:
        tokens = strict_tokens(request)
        usage = Usage(tokens, 10)
        if request.system == SUMMARY_PROMPT:
            return reply(self.summary(request), usage=usage)
        self.largest = max(self.largest, tokens)
        self.asked += 1
        if self.asked <= self.rounds:
            return reply(tool_calls=[("short", {"n": self.asked})], usage=usage)
        return reply("done", usage=usage)


@tool
def short(n: int) -> str:
    """Fetch a short page."""
    return "r" * 200


@pytest.mark.parametrize(
    "summary",
    [
        pytest.param(lambda request: "s" * 160_000, id="ignores-max-tokens"),
        pytest.param(
            lambda request: "s" * (request.settings.max_tokens * 4), id="fills-max-tokens"
        ),
    ],
)
async def test_a_verbose_summarizer_in_a_small_window_does_not_compact_every_round(
    summary: Any,
) -> None:
    model = ManyRounds(120, summary)
    agent = Agent(
        "r",
        FunctionModel(model),
        "Read.",
        tools=[short],
        settings=ModelSettings(context_window=1_500),
        compaction=Compaction(summary_tokens=1024),
    )
    runtime = Runtime()
    session = await runtime.create_session(agent)
    events: list[Any] = []
    # 120 rounds: past the default bound on rounds, lifted.
    result = await session.run("go", emit=events.append, options=RunOptions(max_rounds=None))
    assert result.status is RunStatus.COMPLETED
    finished = [e for e in events if isinstance(e, CompactionFinished)]
    assert finished and len(finished) <= model.asked // 4, len(finished)
    assert all(e.tokens_after < e.tokens_before for e in finished)
    assert model.largest <= 1_500, model.largest


async def test_a_hung_summarizer_takes_a_share_of_the_deadline_and_the_run_goes_on() -> None:
    # The default summary_timeout (120 s) is far beyond this run's deadline:
    # the summary gets a share of what the run has left, then a cut without
    # a summary, and the run completes its remaining rounds.
    never = asyncio.Event()

    async def hangs(request: ModelRequest) -> Any:
        await never.wait()

    model = LongModel(rounds=12)
    agent = Agent(
        "r",
        FunctionModel(model),
        tools=[fetch],
        settings=ModelSettings(context_window=WINDOW),
        compaction=Compaction(keep_recent=4, summarizer=FunctionModel(hangs)),
    )
    assert Compaction().summary_timeout == 120.0
    session = await Runtime().create_session(agent)
    result = await session.run("go", options=RunOptions(deadline=6))
    # Before, the summary waited out the run's deadline: the run ended DEADLINE.
    assert result.status is RunStatus.COMPLETED, (result.status, result.error)
    assert result.text == "read them all" and model.asked == 13
    entries = [e.payload for e in await session.entries() if e.kind == EntryKind.COMPACTION]
    print(f"{len(entries)} compaction(s): {[getattr(e, 'note', None) for e in entries]}")
    assert entries
    for entry in entries:
        assert isinstance(entry, CompactionEntry)
        assert entry.method == "dropped"
        assert "of the time the run had left" in (entry.note or ""), entry.note
