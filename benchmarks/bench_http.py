"""CPU per model request over HTTP, per wire API: each adapter's `request()` against a bare httpx2 loop.

For each wire (Chat Completions, Responses, Anthropic Messages, Gemini), both
sides post the same request (the URL, body and headers the adapter sends,
captured once) to a `FakeServer` running in a separate process on loopback,
so only this process's CPU (`time.process_time`) is counted. The bare loop
parses the answer minimally: `response.json()` and the answer's text for
JSON, and `json.loads` of each `data:` line for a stream, read to its end.
DESIGN.md's budget is an adapter at most 1.25x the bare loop.

    python benchmarks/bench_http.py [--n 2000] [--warmup 100] [--rounds 10] [--wires chat,gemini]

Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx2

from taskloom.messages import Message
from taskloom.models import ModelRequest
from taskloom.testing.fake_server import FakeServer

ANSWER = (
    "The capital of France is Paris. It has been the country's capital for most of "
    "the last thousand years and is its largest city."
)
TARGET = 1.25
SENT_HEADERS = ("authorization", "content-type", "x-api-key", "anthropic-version", "x-goog-api-key")

Request = Callable[[], Awaitable[Any]]
Json = dict[str, Any]


def _chat_text(data: Json) -> str:
    return str(data["choices"][0]["message"]["content"])


def _chat_delta(event: Json) -> str:
    return "".join(c["delta"].get("content") or "" for c in event["choices"])


def _responses_text(data: Json) -> str:
    return str(data["output"][0]["content"][0]["text"])


def _responses_delta(event: Json) -> str:
    return str(event["delta"]) if event["type"] == "response.output_text.delta" else ""


def _anthropic_text(data: Json) -> str:
    return str(data["content"][0]["text"])


def _anthropic_delta(event: Json) -> str:
    return str(event["delta"].get("text") or "") if event["type"] == "content_block_delta" else ""


def _gemini_text(data: Json) -> str:
    return "".join(p.get("text") or "" for p in data["candidates"][0]["content"]["parts"])


@dataclass(frozen=True)
class Wire:
    """One wire API: its adapter, where the fake server answers it, and a minimal parser."""

    name: str
    module: str
    adapter: str
    model_name: str
    base_url: Callable[[str], str]
    text: Callable[[Json], str]
    delta: Callable[[Json], str]

    def model(self, root: str, client: httpx2.AsyncClient, *, stream: bool) -> Any:
        cls = getattr(importlib.import_module(self.module), self.adapter)
        return cls(
            self.model_name,
            api_key="bench-key",
            base_url=self.base_url(root),
            http_client=client,
            stream=stream,
        )


WIRES = {
    "chat": Wire(
        "chat",
        "taskloom.models._openai_chat",
        "OpenAIChatModel",
        "gpt-4.1-mini",
        lambda root: root + "/v1",
        _chat_text,
        _chat_delta,
    ),
    "responses": Wire(
        "responses",
        "taskloom.models._openai_responses",
        "OpenAIResponsesModel",
        "gpt-5-mini",
        lambda root: root + "/v1",
        _responses_text,
        _responses_delta,
    ),
    "anthropic": Wire(
        "anthropic",
        "taskloom.models._anthropic",
        "AnthropicModel",
        "claude-sonnet-4-5",
        lambda root: root,
        _anthropic_text,
        _anthropic_delta,
    ),
    "gemini": Wire(
        "gemini",
        "taskloom.models._gemini",
        "GeminiModel",
        "gemini-2.5-flash",
        lambda root: root + "/v1beta",
        _gemini_text,
        _gemini_text,
    ),
}


def start_server() -> tuple[subprocess.Popen[str], str]:
    """A FakeServer in its own process; the caller kills it by this pid."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskloom.testing.fake_server", "--text", ANSWER],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1:"):
        proc.kill()
        proc.wait()
        raise SystemExit(f"fake server did not start (got {url!r})")
    return proc, url


def prompt() -> ModelRequest:
    return ModelRequest(messages=[Message.user("What is the capital of France?")])


async def captured_request(wire: Wire, *, stream: bool) -> tuple[str, Any, dict[str, str]]:
    """The path, body and headers the adapter sends, so the bare loop sends exactly the same."""
    async with FakeServer() as server, httpx2.AsyncClient() as client:
        await wire.model(server.url, client, stream=stream).request(prompt())
        sent = server.requests[0]
    headers = {k: v for k, v in sent.headers.items() if k in SENT_HEADERS}
    return sent.path, sent.body, headers


def bare_json(client: httpx2.AsyncClient, url: str, body: Any, headers: Any, wire: Wire) -> Request:
    text = wire.text

    async def run() -> str:
        response = await client.post(url, json=body, headers=headers)
        return text(response.json())

    return run


def bare_stream(
    client: httpx2.AsyncClient, url: str, body: Any, headers: Any, wire: Wire
) -> Request:
    delta = wire.delta

    async def run() -> str:
        text = []
        async with client.stream("POST", url, json=body, headers=headers) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    text.append(delta(json.loads(line[6:])))
        return "".join(text)

    return run


def bare_stream_stopping_at_done(
    client: httpx2.AsyncClient, url: str, body: Any, headers: Any
) -> Request:
    async def run() -> str:
        text = []
        async with client.stream("POST", url, json=body, headers=headers) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    break
                text.append(_chat_delta(json.loads(line[6:])))
        return "".join(text)

    return run


def adapter_run(model: Any) -> Request:
    request = prompt()
    return lambda: model.request(request)


async def measure(
    runs: list[Request], n: int, warmup: int, rounds: int
) -> list[tuple[float, float]]:
    """CPU and wall seconds per request of each run, after `warmup` requests each.

    The runs take turns in `rounds` blocks of `n / rounds` requests, so load
    from other processes on the machine falls on all of them alike.
    """
    for run in runs:
        for _ in range(warmup):
            await run()
    block = max(1, n // rounds)
    cpu, wall = [0.0] * len(runs), [0.0] * len(runs)
    for _ in range(rounds):
        for i, run in enumerate(runs):
            started_cpu, started_wall = time.process_time(), time.perf_counter()
            for _ in range(block):
                await run()
            cpu[i] += time.process_time() - started_cpu
            wall[i] += time.perf_counter() - started_wall
    total = block * rounds
    return [(c / total, w / total) for c, w in zip(cpu, wall, strict=True)]


Row = tuple[str, str, str, tuple[float, float] | None]


async def bench(root: str, wires: list[Wire], n: int, warmup: int, rounds: int) -> list[Row]:
    rows: list[Row] = []
    async with httpx2.AsyncClient(timeout=30) as client:
        plan: list[tuple[str, str, str, Request]] = []
        for wire in wires:
            adapter = f"{wire.adapter}.request()"
            for stream in (False, True):
                path, body, headers = await captured_request(wire, stream=stream)
                url = root + path
                mode = "sse" if stream else "json"
                bare = (bare_stream if stream else bare_json)(client, url, body, headers, wire)
                model = wire.model(root, client, stream=stream)
                plan.append((wire.name, mode, "bare httpx2 loop", bare))
                plan.append((wire.name, mode, adapter, adapter_run(model)))
                if stream and wire.name == "chat":
                    stops = bare_stream_stopping_at_done(client, url, body, headers)
                    plan.append((wire.name, mode, "bare loop, stops at [DONE]", stops))
        results = iter(await measure([run for *_, run in plan], n, warmup, rounds))
        for wire_name, mode, name, _ in plan:
            rows.append((wire_name, mode, name, next(results)))
    return rows


def report(rows: list[Row], n: int) -> None:
    print(f"\nCPU per model request over loopback HTTP, per wire API, N={n} each")
    print(
        f"{'wire':<10} {'mode':<5} {'client':<34} {'CPU us/req':>11} {'wall us/req':>12} "
        f"{'vs bare':>8}"
    )
    bare: dict[tuple[str, str], float] = {}
    for wire, mode, name, result in rows:
        if result is None:
            print(f"{wire:<10} {mode:<5} {name:<34} {'n/a':>11} {'n/a':>12} {'':>8}")
            continue
        cpu, wall = result
        bare.setdefault((wire, mode), cpu)
        ratio = cpu / bare[(wire, mode)]
        print(
            f"{wire:<10} {mode:<5} {name:<34} {cpu * 1e6:>11.1f} {wall * 1e6:>12.1f} {ratio:>7.2f}x"
        )
    print(f"target (DESIGN.md): each adapter <= {TARGET:.2f}x the bare loop of its wire")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="requests per variant")
    parser.add_argument("--warmup", type=int, default=100, help="unmeasured requests first")
    parser.add_argument("--rounds", type=int, default=10, help="turns the variants take")
    parser.add_argument(
        "--wires", default=",".join(WIRES), help=f"which wires, of {', '.join(WIRES)}"
    )
    args = parser.parse_args()
    wires = [WIRES[name.strip()] for name in args.wires.split(",") if name.strip()]
    proc, root = start_server()
    try:
        rows = asyncio.run(bench(root, wires, args.n, args.warmup, args.rounds))
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    report(rows, args.n)


if __name__ == "__main__":
    main()
