"""CPU per model request over HTTP: `OpenAIChatModel.request()` against a bare httpx2 loop.

Both sides post the same Chat Completions request (the body and headers the
adapter sends, captured once) to a `FakeServer` running in a separate process
on loopback, so only this process's CPU (`time.process_time`) is counted. The
bare loop parses the answer minimally: `response.json()` for JSON, and
`json.loads` of each `data:` line for a stream, read to its end. DESIGN.md's
budget is an adapter at most 1.25x the bare loop.

    python benchmarks/bench_http.py [--n 2000] [--warmup 100] [--rounds 10]

Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
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

Request = Callable[[], Awaitable[Any]]


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


def chat_model(base_url: str, client: httpx2.AsyncClient, *, stream: bool) -> Any:
    from taskloom.models._openai_chat import OpenAIChatModel

    return OpenAIChatModel(
        "gpt-4.1-mini", api_key="bench", base_url=base_url, http_client=client, stream=stream
    )


async def captured_request(stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """The body and headers the adapter sends, so the bare loop sends exactly the same."""
    async with FakeServer() as server, httpx2.AsyncClient() as client:
        await chat_model(server.base_url, client, stream=stream).request(prompt())
        sent = server.requests[0]
    headers = {k: v for k, v in sent.headers.items() if k in ("authorization", "content-type")}
    return sent.body, headers


def prompt() -> ModelRequest:
    return ModelRequest(messages=[Message.user("What is the capital of France?")])


def bare_json(client: httpx2.AsyncClient, url: str, body: Any, headers: Any) -> Request:
    async def run() -> str:
        response = await client.post(url, json=body, headers=headers)
        data = response.json()
        return str(data["choices"][0]["message"]["content"])

    return run


def bare_stream(
    client: httpx2.AsyncClient, url: str, body: Any, headers: Any, *, stop_at_done: bool = False
) -> Request:
    async def run() -> str:
        text = []
        async with client.stream("POST", url, json=body, headers=headers) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    if stop_at_done:
                        break
                    continue
                for choice in json.loads(line[6:])["choices"]:
                    text.append(choice["delta"].get("content") or "")
        return "".join(text)

    return run


def adapter_run(model: Any) -> Request | None:
    if model is None:
        return None
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


async def bench(root: str, n: int, warmup: int, rounds: int) -> None:
    base_url = root + "/v1"
    url = base_url + "/chat/completions"
    rows: list[tuple[str, str, tuple[float, float] | None]] = []
    async with httpx2.AsyncClient(timeout=30) as client:
        try:
            json_body, json_headers = await captured_request(stream=False)
            sse_body, sse_headers = await captured_request(stream=True)
            adapters: dict[bool, Any] = {
                s: chat_model(base_url, client, stream=s) for s in (False, True)
            }
        except ImportError as exc:
            print(f"OpenAIChatModel unavailable ({exc}); measuring the bare loop only")
            json_body, json_headers = {"model": "gpt-4.1-mini", "messages": []}, {}
            sse_body = json_body | {"stream": True, "stream_options": {"include_usage": True}}
            sse_headers, adapters = {}, {}
        bare = "bare httpx2 loop"
        adapter = "OpenAIChatModel.request()"
        plan: list[tuple[str, str, Request | None]] = [
            ("json", bare, bare_json(client, url, json_body, json_headers)),
            ("json", adapter, adapter_run(adapters.get(False))),
            ("sse", bare, bare_stream(client, url, sse_body, sse_headers)),
            ("sse", adapter, adapter_run(adapters.get(True))),
            (
                "sse",
                "bare loop, stops at [DONE]",
                bare_stream(client, url, sse_body, sse_headers, stop_at_done=True),
            ),
        ]
        runs = [run for _, _, run in plan if run is not None]
        results = iter(await measure(runs, n, warmup, rounds))
        for mode, name, run in plan:
            rows.append((mode, name, None if run is None else next(results)))
    report(rows, n)


def report(rows: list[tuple[str, str, tuple[float, float] | None]], n: int) -> None:
    print(f"\nCPU per Chat Completions request over loopback HTTP, N={n} each")
    print(f"{'mode':<6} {'client':<30} {'CPU us/req':>11} {'wall us/req':>12} {'vs bare':>8}")
    bare: dict[str, float] = {}
    for mode, name, result in rows:
        if result is None:
            print(f"{mode:<6} {name:<30} {'n/a':>11} {'n/a':>12} {'':>8}")
            continue
        cpu, wall = result
        bare.setdefault(mode, cpu)
        ratio = cpu / bare[mode]
        print(f"{mode:<6} {name:<30} {cpu * 1e6:>11.1f} {wall * 1e6:>12.1f} {ratio:>7.2f}x")
    print(f"target (DESIGN.md): OpenAIChatModel <= {TARGET:.2f}x the bare loop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="requests per variant")
    parser.add_argument("--warmup", type=int, default=100, help="unmeasured requests first")
    parser.add_argument("--rounds", type=int, default=10, help="turns the variants take")
    args = parser.parse_args()
    proc, root = start_server()
    try:
        asyncio.run(bench(root, args.n, args.warmup, args.rounds))
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


if __name__ == "__main__":
    main()
