"""Warm runs of `bench_loop_http.py`'s conversation in one process, for counting
a warm run's instructions with cachegrind:

    python benchmarks/_warm_run.py MODE BASE_URL RUNS

MODE is `bare` or `bare-stream` (the bare httpx2 loop, whole or streamed
answers), or `taskloom`, `taskloom-stream`, `taskloom-events` (streamed, every
event read by a subscriber through `agent.stream`) or `taskloom-budget` (under
a tree `Budget`), each a sync tool with `blocking=False` as the benchmark's
variants; `bare-nohttp` and `taskloom-nohttp` are `bare` and `taskloom` with
no socket: the request's body is encoded as usual and the server's own
`_reply` answers it in process (taskloom's through the adapter's `send_json`),
so what is left is each loop's own work and memory without the HTTP stack's
(`_warm_misses.py` compares their working sets). `taskloom-loop` and
`taskloom-adapter` split `taskloom-nohttp` in two: the loop with the model's
answers replayed (the warm-up's responses, by the request's message count: no
body encoded or decoded), and the adapter alone (the warm-up's last run's four
requests sent again through `model.request`, answered in process, with no
run around them). The process makes ten warm-up runs, then RUNS more; a warm run's
instructions are a process of 60 runs minus one of 10, over 50:

    PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no \\
        --cachegrind-out-file=/dev/null python benchmarks/_warm_run.py taskloom URL 50

against the `bench_loop_http.py --serve` server. The loop's `FRESH_BOUNDARY`
is set to 5 s: under valgrind's slowdown the 50 ms window lapses and adds
log reads a normal run does not make.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from bench_loop_http import (
    ANSWER,
    INSTRUCTIONS,
    PROMPT,
    _post_json,
    _post_sse,
    _reply,
    add,
    bare_run,
)

WARM_UP = 10


async def _answered(body: Any, encoded: bytes | None = None) -> dict[str, Any]:
    """The server's decoded answer to a request, with no socket: one pass of
    the event loop, as a reply that is already in takes."""
    await asyncio.sleep(0)
    return json.loads(json.dumps(_reply(json.loads(encoded) if encoded else body)))


async def bare_nohttp(runs: int) -> None:
    import bench_loop_http

    async def post(client: Any, url: str, body: Any) -> dict[str, Any]:
        answer = await _answered(body, json.dumps(body).encode())
        message: dict[str, Any] = answer["choices"][0]["message"]
        return message

    bench_loop_http._post_json = post  # bare_run takes it when the run is made
    run = bare_run(None, "", stream=False, tool=add)  # type: ignore[arg-type]
    for _ in range(WARM_UP + runs):
        if (await run()).strip() != ANSWER:
            raise AssertionError("unexpected answer")


async def bare(base_url: str, runs: int, stream: bool) -> None:
    import httpx2

    from taskloom.models import _http as taskloom_http

    limits = taskloom_http.DEFAULT_LIMITS
    async with httpx2.AsyncClient(timeout=taskloom_http.DEFAULT_TIMEOUT, limits=limits) as client:
        run = bare_run(client, base_url + "/chat/completions", stream=stream, tool=add)
        assert _post_json and _post_sse
        for _ in range(WARM_UP + runs):
            await run()


async def ours(base_url: str, runs: int, mode: str) -> None:
    from taskloom import Agent, Budget, RunOptions, tool
    from taskloom.loop import _run
    from taskloom.models import OpenAIChatModel

    _run.FRESH_BOUNDARY = 5.0
    if mode in ("taskloom-nohttp", "taskloom-loop", "taskloom-adapter"):
        from taskloom.models import _adapter

        async def send_json(client: Any, target: Any, body: Any, encoded: Any = None) -> Any:
            return await _answered(body, encoded)

        _adapter.send_json = send_json
    stream = mode in ("taskloom-stream", "taskloom-events")
    model = OpenAIChatModel("gpt-4.1-mini", api_key="bench", base_url=base_url, stream=stream)
    agent = Agent("adder", model, INSTRUCTIONS, tools=[tool(blocking=False)(add)])
    options = RunOptions(budget=Budget(tokens=10**12)) if mode == "taskloom-budget" else None
    if mode in ("taskloom-loop", "taskloom-adapter"):
        await parts(agent, model, runs, mode)
        return
    for _ in range(WARM_UP + runs):
        if mode == "taskloom-events":
            from taskloom.events import RunFinished

            done = [e async for e in agent.stream(PROMPT) if isinstance(e, RunFinished)]
            text = done[-1].result.text
        else:
            text = (await agent.run(PROMPT, options=options)).text
        if text.strip() != ANSWER:
            raise AssertionError(text)


async def parts(agent: Any, model: Any, runs: int, mode: str) -> None:
    """`taskloom-loop` and `taskloom-adapter`: the warm-up records each
    request and its response (the class's `request` wrapped: the model has
    slots), then the runs replay one side."""
    cls = type(model)
    send = cls.request
    requests: list[Any] = []
    responses: dict[int, Any] = {}

    async def recording(self: Any, request: Any) -> Any:
        response = await send(self, request)
        requests.append(request)
        responses[len(request.messages)] = response
        return response

    async def replaying(self: Any, request: Any) -> Any:
        await asyncio.sleep(0)
        return responses[len(request.messages)]

    cls.request = recording
    for _ in range(WARM_UP):
        if (await agent.run(PROMPT)).text.strip() != ANSWER:
            raise AssertionError("unexpected answer")
    last = requests[-4:]
    if mode == "taskloom-adapter":
        cls.request = send
        for _ in range(runs):
            for request in last:
                await model.request(request)
        return
    cls.request = replaying
    for _ in range(runs):
        if (await agent.run(PROMPT)).text.strip() != ANSWER:
            raise AssertionError("unexpected answer")


def main() -> None:
    mode, base_url, runs = sys.argv[1], sys.argv[2] + "/v1", int(sys.argv[3])
    if mode == "bare-nohttp":
        asyncio.run(bare_nohttp(runs))
    elif mode.startswith("bare"):
        asyncio.run(bare(base_url, runs, mode == "bare-stream"))
    else:
        asyncio.run(ours(base_url, runs, mode))


if __name__ == "__main__":
    main()
