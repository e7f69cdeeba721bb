"""One conversation in a fresh process, for `bench_loop_http.py --cold`: prints
the process's CPU seconds from its start to the end of the first run.

    python benchmarks/_cold_run.py {bare|taskloom|nothing|import-bare|import-taskloom} BASE_URL [RUNS]

`bare` imports httpx2 and runs the conversation RUNS times (default 1)
directly on one client; `taskloom` imports taskloom and runs it RUNS times
as `agent.run(...)`, as the README writes it; `nothing` only starts the
interpreter (the part every process pays); `import-bare` and
`import-taskloom` only import what the two loops import. Kept apart from
bench_loop_http.py so neither child imports what the other does not need.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

PROMPT = "What is 1 + 1, plus 1, plus 1?"
INSTRUCTIONS = "You add numbers with the add tool, one call at a time."
MODEL = "gpt-4.1-mini"
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


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def bare(base_url: str, runs: int) -> None:
    import httpx2

    async with httpx2.AsyncClient() as client:
        for _ in range(runs):
            await _bare_run(client, base_url)


async def _bare_run(client: Any, base_url: str) -> str:
    messages: list[dict[str, object]] = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": PROMPT},
    ]
    while True:
        body = {"model": MODEL, "messages": messages, "tools": TOOLS}
        response = await client.post(
            base_url + "/chat/completions", json=body, headers={"authorization": "Bearer x"}
        )
        message = response.json()["choices"][0]["message"]
        messages.append(message)
        calls = message.get("tool_calls")
        if not calls:
            return str(message["content"])
        for call in calls:
            out = add(**json.loads(call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(out)})


async def ours(base_url: str, runs: int) -> None:
    from taskloom import Agent, tool
    from taskloom.models import OpenAIChatModel

    model = OpenAIChatModel(MODEL, api_key="x", base_url=base_url, stream=False)
    agent = Agent("adder", model, INSTRUCTIONS, tools=[tool(blocking=False)(add)])
    for _ in range(runs):
        await agent.run(PROMPT)


def main() -> None:
    mode, base_url = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    if mode == "bare":
        asyncio.run(bare(base_url, runs))
    elif mode == "taskloom":
        asyncio.run(ours(base_url, runs))
    elif mode == "import-bare":
        import httpx2  # noqa: F401
    elif mode == "import-taskloom":
        import taskloom  # noqa: F401
        from taskloom.models import OpenAIChatModel  # noqa: F401
    print(f"{time.process_time():.6f} {len(sys.modules)}")


if __name__ == "__main__":
    main()
