"""CPU per model request of a whole agent loop over HTTP, against a bare httpx2 loop.

Each run is a short conversation with an OpenAI-compatible server on loopback:
three rounds in which the model asks for one tool call, then a final answer
(four requests a run). taskloom runs it as `agent.run(...)`; beside it, a bare
loop written directly on httpx2 sends the same requests (the same system
prompt, tool schema and growing message list), calls the same tool inline and
parses the answers minimally. The server (`--serve`, started here in its own
process) answers from the conversation itself: a tool call until three tool
results are in it, then text, so both loops get the same replies. Only this
process's CPU (`time.process_time`) counts; the ratio is taskloom's CPU per
request over the bare loop's, measured in the same command, the loops taking
turns in blocks so load from other processes falls on both alike.

Variants: a sync tool and an async tool, runs one after another; 50 runs at
once; streamed answers (SSE); 20 ms of server latency per request; the
default sync tool on a worker thread. Then cold processes (`_cold_run.py`),
whole-process CPU against the bare loop's in a fresh interpreter: the import
alone, the import and the first run (client set-up and all), and a process
that makes 200 runs (800 requests), which pays the import and the first run
once; the interpreter's own start-up is shown apart.

    python benchmarks/bench_loop_http.py [--runs 200] [--blocks 10] [--only NAME]
        [--cold 9] [--cold-runs 200]

Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx2

from taskloom.models import _http as taskloom_http

# The bare loop's client is set up as taskloom's shared one is (in a tree
# older than DEFAULT_LIMITS, httpx2's default limits).
DEFAULT_TIMEOUT = taskloom_http.DEFAULT_TIMEOUT
DEFAULT_LIMITS = getattr(taskloom_http, "DEFAULT_LIMITS", httpx2.Limits())

ROUNDS = 3
MODEL = "gpt-4.1-mini"
INSTRUCTIONS = "You add numbers with the add tool, one call at a time."
PROMPT = "What is 1 + 1, plus 1, plus 1?"
ANSWER = "The sum is 4."
TARGET = 1.25
CONCURRENCY = 50


# --------------------------------------------------------------------------- the server


def _reply(body: dict[str, Any]) -> dict[str, Any]:
    """A tool call until the conversation holds `ROUNDS` tool results, then text."""
    done = sum(1 for m in body.get("messages", ()) if m.get("role") == "tool")
    usage = {"prompt_tokens": 40 + 20 * done, "completion_tokens": 12, "total_tokens": 52}
    if done < ROUNDS:
        call = {
            "id": f"call_{done}",
            "type": "function",
            "function": {"name": "add", "arguments": json.dumps({"a": done + 1, "b": 1})},
        }
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": ANSWER}, "stop"
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


def _chunks(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """The reply as Chat Completions stream chunks, as OpenAI splits them."""
    head = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = reply["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    for call in message.get("tool_calls") or ():
        args = call["function"]["arguments"]
        first = {"id": call["id"], "type": "function", "function": {"name": "add", "arguments": ""}}
        out.append(chunk({"tool_calls": [{"index": 0} | first]}))
        half = len(args) // 2
        for part in (args[:half], args[half:]):
            out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}))
    text = message.get("content") or ""
    for word in text.split(" ") if text else ():
        out.append(chunk({"content": word + " "}))
    out.append(chunk({}, choice["finish_reason"]))
    out.append(head | {"choices": [], "usage": reply["usage"]})
    return out


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            _method, target, _ = line.decode("latin-1").split(" ", 2)
            length = 0
            while (raw := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = raw.decode("latin-1").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            body = json.loads(await reader.readexactly(length))
            # /lat20/v1/chat/completions: answer 20 ms late.
            if target.startswith("/lat"):
                await asyncio.sleep(int(target[4:].split("/", 1)[0]) / 1000)
            reply = _reply(body)
            if not body.get("stream"):
                payload = json.dumps(reply).encode()
                head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n"
                writer.write(head.encode() + payload)
            else:
                head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                parts = [head.encode()]
                for event in [*(json.dumps(c) for c in _chunks(reply)), "[DONE]"]:
                    data = f"data: {event}\n\n".encode()
                    parts.append(b"%x\r\n%s\r\n" % (len(data), data))
                parts.append(b"0\r\n\r\n")
                writer.write(b"".join(parts))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


async def _serve() -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    await server.serve_forever()


def start_server() -> tuple[subprocess.Popen[str], str]:
    """The server in its own process; the caller kills it by this pid."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1:"):
        proc.kill()
        proc.wait()
        raise SystemExit(f"the server did not start (got {url!r})")
    return proc, url


# --------------------------------------------------------------------------- the tools


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def add_async(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]


# --------------------------------------------------------------------------- the bare loop


async def _post_json(client: httpx2.AsyncClient, url: str, body: Any) -> dict[str, Any]:
    response = await client.post(url, json=body, headers={"authorization": "Bearer bench"})
    response.raise_for_status()
    message: dict[str, Any] = response.json()["choices"][0]["message"]
    return message


async def _post_sse(client: httpx2.AsyncClient, url: str, body: Any) -> dict[str, Any]:
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    headers = {"authorization": "Bearer bench"}
    async with client.stream("POST", url, json=body, headers=headers) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:])["choices"]:
                delta = choice["delta"]
                if delta.get("content"):
                    text.append(delta["content"])
                for part in delta.get("tool_calls") or ():
                    call = calls.setdefault(
                        part["index"], {"id": "", "type": "function", "function": {}}
                    )
                    call["id"] = part.get("id") or call["id"]
                    fn = part.get("function") or {}
                    if "name" in fn:
                        call["function"]["name"] = fn["name"]
                    call["function"]["arguments"] = call["function"].get("arguments", "") + (
                        fn.get("arguments") or ""
                    )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def bare_run(client: httpx2.AsyncClient, url: str, *, stream: bool, tool: Any) -> Run:
    """One conversation written directly on httpx2: post, read, call the tool, repeat."""
    is_async = asyncio.iscoroutinefunction(tool)
    post = _post_sse if stream else _post_json
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}

    async def run() -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": PROMPT},
        ]
        while True:
            body = {"model": MODEL, "messages": messages, "tools": TOOLS, **extra}
            message = await post(client, url, body)
            messages.append(message)
            calls = message.get("tool_calls")
            if not calls:
                return str(message["content"])
            for call in calls:
                args = json.loads(call["function"]["arguments"])
                out = await tool(**args) if is_async else tool(**args)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(out)})

    return run


# --------------------------------------------------------------------------- taskloom


def taskloom_run(
    base_url: str,
    *,
    stream: bool,
    tool: Any,
    events: bool = False,
    budget: bool = False,
    **tool_options: Any,
) -> Run:
    """The same conversation as `agent.run(...)`, the way the README writes it
    (with `events`, as `agent.stream(...)` read to its end; with `budget`,
    under a tree budget that each request charges and settles)."""
    from taskloom import Agent
    from taskloom import tool as as_tool
    from taskloom.events import RunFinished
    from taskloom.models import OpenAIChatModel

    model = OpenAIChatModel(MODEL, api_key="bench", base_url=base_url, stream=stream)
    try:
        made = as_tool(**tool_options)(tool) if tool_options else tool
    except TypeError:  # a taskloom tree older than the option (measuring "before")
        made = tool
    agent = Agent(name="adder", model=model, instructions=INSTRUCTIONS, tools=[made])
    options = None
    if budget:
        from taskloom import Budget, RunOptions

        options = RunOptions(budget=Budget(tokens=10**12))

    async def run() -> str:
        if events:
            finished = [e async for e in agent.stream(PROMPT) if isinstance(e, RunFinished)]
            result = finished[-1].result
        else:
            result = await agent.run(PROMPT, options=options)
        if result.text.strip() != ANSWER:
            raise AssertionError(f"unexpected run result: {result.status} {result.text!r}")
        return result.text

    return run


# --------------------------------------------------------------------------- measuring

Run = Callable[[], Awaitable[str]]


@dataclass
class Variant:
    name: str
    stream: bool = False
    tool: Any = add
    tool_options: dict[str, Any] | None = None
    concurrency: int = 1
    latency_ms: int = 0
    events: bool = False
    budget: bool = False


VARIANTS = [
    Variant("sequential, sync tool (blocking=False)", tool_options={"blocking": False}),
    Variant("sequential, async tool", tool=add_async),
    Variant("50 concurrent runs, async tool", tool=add_async, concurrency=CONCURRENCY),
    Variant("streaming, sync tool (blocking=False)", stream=True, tool_options={"blocking": False}),
    Variant(
        "streaming, every event to a subscriber",
        stream=True,
        tool_options={"blocking": False},
        events=True,
    ),
    Variant(
        "20 ms latency, sync tool (blocking=False)", tool_options={"blocking": False}, latency_ms=20
    ),
    Variant("sequential, sync tool on a thread (default)"),
    Variant(
        "sequential, sync tool (blocking=False), Budget",
        tool_options={"blocking": False},
        budget=True,
    ),
]


async def _batch(run: Run, runs: int, concurrency: int) -> None:
    if concurrency == 1:
        for _ in range(runs):
            await run()
        return
    for _ in range(0, runs, concurrency):
        await asyncio.gather(*(run() for _ in range(concurrency)))


class PassCounter:
    """Counts the event loop's passes (`_run_once` calls: one per wake-up of the
    loop, each running every callback ready then) while it is on."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.passes = 0
        self.on = False
        original = loop._run_once  # type: ignore[attr-defined]

        def counted() -> None:
            if self.on:
                self.passes += 1
            original()

        loop._run_once = counted  # type: ignore[attr-defined]

    async def per_request(self, run: Run, runs: int, concurrency: int) -> float:
        self.passes, self.on = 0, True
        try:
            await _batch(run, runs, concurrency)
        finally:
            self.on = False
        return self.passes / (runs * (ROUNDS + 1))


@dataclass
class Measured:
    bare: float  # CPU seconds per request, all blocks
    ours: float
    ratio: float  # the median of the blocks' ratios
    spread: tuple[float, float]  # their quartiles
    best_ratio: float  # taskloom's fastest block over the bare loop's
    bare_passes: float  # event-loop passes per request
    our_passes: float


async def measure(variant: Variant, root: str, runs: int, blocks: int) -> Measured:
    """CPU per model request of the bare loop and of taskloom, then event-loop
    passes per request of each (counted in runs of their own).

    The two loops take turns in `blocks` short blocks, in the order ABBA, so
    drift in the machine's speed falls on both alike; the ratio reported is
    the median of the blocks' ratios (a burst of load elsewhere moves a few
    blocks, not the median). Each variant runs in an event loop of its own
    (`asyncio.run`), so each starts with empty connection pools: the bare
    loop's client and taskloom's default one alike.
    """
    counter = PassCounter(asyncio.get_running_loop())
    prefix = f"/lat{variant.latency_ms}" if variant.latency_ms else ""
    base_url = f"{root}{prefix}/v1"
    async with httpx2.AsyncClient(timeout=DEFAULT_TIMEOUT, limits=DEFAULT_LIMITS) as client:
        bare = bare_run(
            client, base_url + "/chat/completions", stream=variant.stream, tool=variant.tool
        )
        ours = taskloom_run(
            base_url,
            stream=variant.stream,
            tool=variant.tool,
            events=variant.events,
            budget=variant.budget,
            **(variant.tool_options or {}),
        )
        per_block = max(variant.concurrency, runs // blocks)
        for run in (bare, ours):  # warm up: connections, imports, caches
            await _batch(run, max(variant.concurrency, 20), variant.concurrency)
        totals = [0.0, 0.0]
        best = [float("inf"), float("inf")]
        ratios: list[float] = []
        gc.collect()
        for block in range(blocks):
            cpu = [0.0, 0.0]
            for i in (0, 1) if block % 2 == 0 else (1, 0):
                started = time.process_time()
                await _batch((bare, ours)[i], per_block, variant.concurrency)
                cpu[i] = time.process_time() - started
                totals[i] += cpu[i]
                best[i] = min(best[i], cpu[i])
            ratios.append(cpu[1] / cpu[0])
        requests = per_block * blocks * (ROUNDS + 1)
        n = max(variant.concurrency, 20)
        passes = [await counter.per_request(run, n, variant.concurrency) for run in (bare, ours)]
        quartiles = statistics.quantiles(ratios, n=4)
        return Measured(
            totals[0] / requests,
            totals[1] / requests,
            statistics.median(ratios),
            (quartiles[0], quartiles[2]),
            best[1] / best[0],
            passes[0],
            passes[1],
        )


def bench(root: str, runs: int, blocks: int, only: str | None) -> None:
    print(
        f"\nCPU per model request, {runs} runs x {ROUNDS} tool rounds + a final answer "
        f"({ROUNDS + 1} requests a run) per loop and variant, in {blocks} blocks"
    )
    print(
        f"{'variant':<46} {'bare us/req':>11} {'taskloom':>9} {'ratio':>6} {'(quartiles)':>12}"
        f" {'best/best':>9}"
        f" {'passes/req bare':>16} {'taskloom':>9}"
    )
    for variant in VARIANTS:
        if only and only not in variant.name:
            continue
        m = asyncio.run(measure(variant, root, runs, blocks))
        low, high = m.spread
        print(
            f"{variant.name:<46} {m.bare * 1e6:>11.1f} {m.ours * 1e6:>9.1f} {m.ratio:>5.2f}x"
            f" ({low:.2f}-{high:.2f}) {m.best_ratio:>8.2f}x"
            f" {m.bare_passes:>16.2f} {m.our_passes:>9.2f}"
        )
    print(f"target: <= {TARGET:.2f}x the bare loop in every variant but the thread row")


def cold(root: str, trials: int, runs: int) -> None:
    """Fresh processes, taskloom against the bare loop, taking turns: the
    import alone, the first run, and a whole process of `runs` runs."""
    import compileall
    import os

    import taskloom

    # As an installed wheel has it (and httpx2 in site-packages has it): a
    # source tree run under PYTHONDONTWRITEBYTECODE would otherwise compile
    # every module of taskloom in every child.
    compileall.compile_dir(os.path.dirname(taskloom.__file__), quiet=1)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_cold_run.py")

    def one(mode: str, n: int) -> tuple[float, int]:
        out = subprocess.run(
            [sys.executable, script, mode, root, str(n)],
            capture_output=True,
            text=True,
            check=True,
        )
        cpu, modules = out.stdout.split()
        return float(cpu), int(modules)

    kinds = [
        ("nothing", 0),
        ("import-bare", 0),
        ("import-taskloom", 0),
        ("bare", 1),
        ("taskloom", 1),
        ("bare", runs),
        ("taskloom", runs),
    ]
    cpus: dict[tuple[str, int], list[float]] = {kind: [] for kind in kinds}
    modules: dict[tuple[str, int], int] = {}
    for _ in range(trials):
        for kind in kinds:
            cpu, modules[kind] = one(*kind)
            cpus[kind].append(cpu)
    med = {kind: statistics.median(cpus[kind]) for kind in kinds}
    start = med[("nothing", 0)]
    print(
        f"\nA cold process: whole-process CPU (interpreter start-up included), "
        f"median of {trials} processes each, taking turns"
    )
    print(f"interpreter start-up only (with asyncio and json): {start * 1e3:.1f} ms")
    print(
        f"{'process':<40} {'bare ms':>8} {'taskloom ms':>12} {'ratio':>6}"
        f" {'past start-up':>14} {'modules bare/taskloom':>22}"
    )
    rows = [
        ("import (httpx2 / taskloom + its adapter)", ("import-bare", 0), ("import-taskloom", 0)),
        (f"import + first run ({ROUNDS + 1} requests)", ("bare", 1), ("taskloom", 1)),
        (
            f"import + {runs} runs ({runs * (ROUNDS + 1)} requests)",
            ("bare", runs),
            ("taskloom", runs),
        ),
    ]
    for name, bare, ours in rows:
        print(
            f"{name:<40} {med[bare] * 1e3:>8.1f} {med[ours] * 1e3:>12.1f}"
            f" {med[ours] / med[bare]:>5.2f}x"
            f" {(med[ours] - start) / (med[bare] - start):>13.2f}x"
            f" {modules[bare]:>12}/{modules[ours]}"
        )
    print(f"target: the {runs}-run process <= {TARGET:.2f}x the bare loop's, whole-process CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per variant and loop")
    parser.add_argument("--blocks", type=int, default=40, help="turns the two loops take")
    parser.add_argument("--only", default=None, help="variants whose name contains this")
    parser.add_argument("--cold", type=int, default=9, help="fresh processes per loop (0: none)")
    parser.add_argument(
        "--cold-runs", type=int, default=200, help="runs in the cold whole-process row"
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve())
        return
    proc, root = start_server()
    try:
        bench(root, args.runs, args.blocks, args.only)
        if args.cold:
            cold(root, args.cold, args.cold_runs)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


if __name__ == "__main__":
    main()
