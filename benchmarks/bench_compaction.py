"""Compaction's costs, printed as tables.

    python benchmarks/bench_compaction.py

- CPU of the compaction decision per round when none is needed (an agent
  with a `Compaction` policy, a long session under its threshold), against
  the same round without a policy;
- the size estimator's error against the providers' exact counts in the
  recorded traffic (tests/corpora): each request of a multi-request cassette
  estimated from the previous request's reported input tokens plus what was
  appended since (the loop's method), and, for comparison, from 4 characters
  a token alone;
- a run of 120 tool rounds in a 1,500-token window whose summarizer writes
  160 kB whatever it is asked for: how many rounds compacted and the largest
  request the model saw.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import yaml

from taskloom import Agent, Compaction, ModelSettings, Runtime, tool
from taskloom.entries import Entry, MessageEntry
from taskloom.events import CompactionFinished
from taskloom.log import message_chars
from taskloom.loop import SUMMARY_PROMPT, ContextEstimate
from taskloom.loop._compact import Compactor
from taskloom.loop.ports import RunLoop
from taskloom.messages import Message, Usage
from taskloom.models import FunctionModel, ModelRequest, ScriptedModel, reply

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpora" / "pydantic-ai-cassettes"


async def decision_cost(rounds: int = 200_000) -> tuple[float, float]:
    """µs per `before_request` with a policy (under threshold) and without one."""
    runtime = Runtime()
    agent = Agent(
        "bench",
        ScriptedModel([]),
        "Be brief.",
        settings=ModelSettings(context_window=1_000_000),
        compaction=Compaction(),
    )
    session = await runtime.create_session(agent)
    for n in range(200):
        message = Message.user(f"message {n} " * 20)
        await session.append(Entry.of(MessageEntry(message)), message)
    loop = RunLoop(session, None, None)
    timings = []
    for compactor in (loop.compactor, Compactor(loop, None)):
        start = time.process_time()
        for _ in range(rounds):
            await compactor.before_request()
        timings.append((time.process_time() - start) / rounds * 1e6)
    return timings[0], timings[1]


@tool
def page(n: int) -> str:
    """Fetch page n."""
    return "r" * 200


async def verbose_summarizer(rounds: int = 120, window: int = 1_500) -> tuple[int, int]:
    """Rounds that compacted and the largest request (characters) of a run in
    a small window whose summarizer writes 160 kB."""
    largest = asked = 0

    def model(request: ModelRequest) -> Any:
        nonlocal largest, asked
        chars = len(request.system or "") + sum(message_chars(m) for m in request.messages)
        usage = Usage(chars // 4 + 1, 10)
        if request.system == SUMMARY_PROMPT:
            return reply("s" * 160_000, usage=usage)
        largest = max(largest, chars)
        asked += 1
        if asked <= rounds:
            return reply(tool_calls=[("page", {"n": asked})], usage=usage)
        return reply("done", usage=usage)

    agent = Agent(
        "bench",
        FunctionModel(model),
        "Read.",
        tools=[page],
        settings=ModelSettings(context_window=window),
        compaction=Compaction(summary_tokens=1024),
    )
    session = await Runtime().create_session(agent)
    events: list[Any] = []
    await session.run("go", emit=events.append)
    return sum(isinstance(e, CompactionFinished) for e in events), largest


_NOT_TEXT = {
    # Binary payloads and opaque replays: tokens are not 4 characters of them.
    "data",
    "image_url",
    "url",
    "file_data",
    "source",
    "encrypted_content",
    "signature",
    # Request options, not prompt text.
    "model",
    "type",
    "role",
    "stream",
    "max_tokens",
    "max_output_tokens",
}


def _chars(value: Any) -> int:
    """Characters of the text of a request body that reaches the model."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_chars(v) for k, v in value.items() if k not in _NOT_TEXT)
    if isinstance(value, list):
        return sum(_chars(v) for v in value)
    return len(json.dumps(value)) if value is not None else 0


def _input_tokens(body: Any) -> int | None:
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return None
    tokens = usage.get("prompt_tokens", usage.get("input_tokens"))
    if not isinstance(tokens, int) or tokens <= 0:
        return None
    for extra in ("cache_read_input_tokens", "cache_creation_input_tokens"):
        tokens += int(usage.get(extra) or 0)
    return tokens


def estimator_errors() -> tuple[list[float], list[float], list[float]]:
    """Relative errors of the calibrated estimate (all, and requests of 1,000
    tokens or more) and of the 4-chars rule."""
    calibrated: list[float] = []
    large: list[float] = []
    cold: list[float] = []
    for path in sorted(CORPUS.rglob("*.yaml")):
        interactions = yaml.safe_load(path.read_text()).get("interactions") or []
        seen: list[tuple[int, int]] = []
        for it in interactions:
            request = (it.get("request") or {}).get("parsed_body")
            response = (it.get("response") or {}).get("parsed_body")
            if not isinstance(request, dict) or not isinstance(response, dict):
                continue
            tokens = _input_tokens(response)
            if tokens is None:
                continue
            chars = _chars(request)
            if "image" in json.dumps(request) or "document" in json.dumps(request):
                continue  # images and documents are counted by their own rules
            cold.append(abs(chars / 4 - tokens) / tokens)
            # The loop's method applies within one conversation: a request
            # that extends the previous one.
            if seen and chars >= seen[-1][0]:
                estimate = ContextEstimate()
                estimate.observe(*seen[-1])
                error = abs(estimate.estimate(chars) - tokens) / tokens
                calibrated.append(error)
                if tokens >= 1000:
                    large.append(error)
            seen.append((chars, tokens))
    return calibrated, large, cold


def main() -> None:
    with_policy, without = asyncio.run(decision_cost())
    print("| compaction decision per round (none needed) | µs CPU |")
    print("|---|---|")
    print(f"| with a Compaction policy, 200-message session | {with_policy:.2f} |")
    print(f"| without a policy | {without:.2f} |")
    calibrated, large, cold = estimator_errors()
    print()
    print("| size estimate vs the provider's count | requests | mean error | worst |")
    print("|---|---|---|---|")
    for label, errors in (
        ("calibrated by the previous request (the loop's)", calibrated),
        ("the same, requests of 1,000 tokens or more", large),
        ("4 characters a token alone", cold),
    ):
        print(f"| {label} | {len(errors)} | {statistics.mean(errors):.1%} | {max(errors):.1%} |")
    compactions, largest = asyncio.run(verbose_summarizer())
    print()
    print("| 120 rounds, 1,500-token window, a summarizer writing 160 kB | |")
    print("|---|---|")
    print(f"| rounds that compacted | {compactions} |")
    print(f"| largest request, characters | {largest:,} |")


if __name__ == "__main__":
    main()
