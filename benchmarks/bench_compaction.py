"""Compaction's costs, printed as tables.

    python benchmarks/bench_compaction.py

- CPU of the compaction decision per round when none is needed (an agent
  with a `Compaction` policy, a long session under its threshold), against
  the same round without a policy;
- the size estimator's error against the providers' exact counts in the
  recorded traffic (tests/corpora): each request of a multi-request cassette
  estimated from the previous request's reported input tokens plus what was
  appended since (the loop's method), and, for comparison, from 4 characters
  a token alone.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import yaml

from taskloom import Agent, Compaction, ModelSettings, Runtime
from taskloom.entries import Entry, MessageEntry
from taskloom.loop import ContextEstimate
from taskloom.loop._compact import Compactor
from taskloom.loop._run import RunLoop
from taskloom.messages import Message
from taskloom.models import ScriptedModel

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


if __name__ == "__main__":
    main()
