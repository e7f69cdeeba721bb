"""`taskloom demo`: an offline tour of a run, on a scripted model.

Everything the model "says" here is scripted; the runtime around it is the
real one: parallel tool execution, a round strategy, events, usage.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule

from .. import (
    Agent,
    RunOptions,
    Runtime,
    Tool,
    ToolContext,
    ToolEffect,
    Usage,
    tool,
)
from ..loop import RoundBoundary, RoundContext, RoundDecision
from ..models import FunctionModel, ModelRequest, ScriptedModel, reply
from .common import Demo
from .render import EventPrinter, terminal, usage_table

__all__ = ["run_demo"]

FORECASTS = {
    "Oslo": "4°C, light rain",
    "Bergen": "7°C, heavy rain",
    "Tromsø": "-3°C, clear, northern lights likely",
}


def _make_weather_tool(pause: float) -> Tool:
    @tool(effect=ToolEffect.READ_ONLY)
    async def get_weather(city: str, ctx: ToolContext) -> str:
        """Today's forecast for a Norwegian city.

        Args:
            city: the city's name
        """
        ctx.progress(f"querying the forecast service for {city}")
        await asyncio.sleep(pause * random.uniform(0.5, 1.0))
        if city not in FORECASTS:
            raise ValueError(f"no forecast for {city}")
        return FORECASTS[city]

    return get_weather


class PackingListCheck:
    """A round strategy: the final answer must include a packing list."""

    def __init__(self, printer: EventPrinter) -> None:
        self.printer = printer

    async def on_round(self, ctx: RoundContext) -> RoundDecision:
        if ctx.boundary is RoundBoundary.ASSISTANT_MESSAGE_COMMITTED:
            text = ctx.assistant_message.text.lower() if ctx.assistant_message else ""
            if "pack" not in text:
                self.printer.note(
                    "[bold yellow]⚑ strategy:[/] no packing list in the answer → injecting a correction"
                )
                return RoundDecision.inject(
                    "You forgot the packing list. Add one, based on the forecasts."
                )
        return RoundDecision.proceed()


def _trip_model(delay: float) -> ScriptedModel:
    return ScriptedModel(
        [
            reply(
                "Let me check all three forecasts at once.",
                tool_calls=[("get_weather", {"city": c}) for c in FORECASTS],
                usage=Usage(412, 58),
            ),
            reply(
                "Go north: Tromsø is clear and cold with a good chance of northern lights, "
                "while Oslo and Bergen are rainy.",
                usage=Usage(530, 31),
            ),
            reply(
                "Go north to Tromsø: clear skies at -3°C and likely northern lights; Oslo and Bergen are wet. "
                "Packing list: thermal layers, insulated boots, a windproof shell, a headlamp, "
                "and a rain jacket for the layover in Bergen.",
                usage=Usage(601, 52),
            ),
        ],
        name="scripted-trip-planner",
        chunk_delay=delay,
    )


async def _part_parallel_and_strategy(console: Console, fast: bool) -> None:
    console.print(Rule("1 · parallel tool calls and a round strategy"))
    agent = Agent(
        "trip-planner",
        _trip_model(0.0 if fast else 0.03),
        "You plan weekend trips in Norway. Check the weather before recommending.",
        tools=[_make_weather_tool(0.0 if fast else 0.8)],
    )
    runtime = Runtime()
    session = await runtime.create_session(agent)
    prompt = "Where should I spend a winter weekend: Oslo, Bergen or Tromsø?"
    console.print(f"[bold]user:[/] {prompt}")
    printer = EventPrinter(console)
    result = await session.run(
        prompt, options=RunOptions(strategy=PackingListCheck(printer), max_rounds=6), emit=printer
    )
    console.print(Panel(result.text, title="final answer", border_style="green"))
    console.print(usage_table(result))


async def _part_approval(console: Console, fast: bool, store: str) -> None:
    console.print(Rule("2 · pause for a human, resume in another process"))

    @tool(needs_approval=lambda args: args["amount"] > 100)
    async def book_cabin(nights: int, amount: float) -> str:
        """Book a cabin (needs approval above 100 EUR)."""
        return f"booked {nights} nights for {amount:.0f} EUR, confirmation TRM-2291"

    model = ScriptedModel(
        [
            reply(
                "I'll book the cabin.",
                tool_calls=[("book_cabin", {"nights": 2, "amount": 340})],
                usage=Usage(220, 30),
            ),
            reply("Booked: 2 nights in Tromsø, confirmation TRM-2291.", usage=Usage(260, 16)),
        ],
        name="scripted-booker",
        chunk_delay=0.0 if fast else 0.02,
    )
    agent = Agent("booker", model, "Book what the user asks for.", tools=[book_cabin])
    printer = EventPrinter(console)
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(agent)
        result = await session.run("Book the cabin in Tromsø for two nights.", emit=printer)
        call = result.pending[0]
        printer.note(
            f"[bold yellow]⏸ run status: {result.status.value}[/] — the parked turn is in {store.split('://')[0]}"
        )
    # A new runtime over the same store: as if a human approved hours later,
    # from another process that holds nothing but the session id.
    async with Runtime(store=store) as later:
        reopened = await later.open_session(session.id, agent)
        await reopened.approve(call.id, note="within the trip budget")
        printer.note(
            f"[bold green]✔ approved[/] {call.name} \\[{call.id}] from a fresh runtime; resuming"
        )
        result = await reopened.resume(emit=printer)
    console.print(Panel(result.text, title="after approval", border_style="green"))


async def _part_background(console: Console, fast: bool) -> None:
    console.print(Rule("3 · work that answers later"))
    from ..background import background_tools

    pause = "0.15" if fast else "1.5"

    @tool(effect=ToolEffect.READ_ONLY)
    async def check_packing(item: str) -> str:
        """Check an item off the packing list."""
        await asyncio.sleep(0.1 if fast else 0.9)
        return f"{item}: packed"

    started: list[str] = []

    def answer(request: ModelRequest) -> Any:
        # Scripted, but reactive: it keeps packing until the backup's notice arrives.
        said = " ".join(m.text for m in request.messages if m.role == "user") + " ".join(
            r.content
            for m in request.messages
            for r in m.results
            if r.tool_name == "background_wait"
        )
        last = request.messages[-1]
        if len(request.messages) == 1:
            command = f"sh -c 'sleep {pause}; echo 212 photos backed up'"
            return reply(
                "I'll start the photo backup and pack meanwhile.",
                tool_calls=[("background_run", {"command": command})],
                usage=Usage(300, 20),
            )
        if not started and last.role == "tool":
            started.append(last.results[0].content.split()[1].rstrip(":"))
        if "finished" in said and "photos backed up" in said:
            return reply(
                "Packed. The backup finished too: 212 photos are safe.", usage=Usage(400, 14)
            )
        if "still running" in said:
            return reply(
                tool_calls=[("background_wait", {"ids": started, "timeout": 30})],
                usage=Usage(380, 10),
            )
        items = ["thermal layers", "headlamp", "wool socks"]
        packed = sum(1 for m in request.messages if m.role == "tool") - 1
        if packed < len(items):
            return reply(
                tool_calls=[("check_packing", {"item": items[packed]})], usage=Usage(330, 12)
            )
        return reply(
            tool_calls=[("background_wait", {"ids": started, "timeout": 30})], usage=Usage(350, 10)
        )

    model = FunctionModel(answer, name="scripted-assistant")
    agent = Agent("assistant", model, tools=[*background_tools(), check_packing])
    printer = EventPrinter(console)
    async with Runtime() as runtime:
        session = await runtime.create_session(agent)
        result = await session.run(
            "Back up my photos and get me packed.", emit=printer, options=RunOptions(max_rounds=8)
        )
    console.print(Panel(result.text, title="final answer", border_style="green"))


async def _part_delegation(console: Console, fast: bool) -> None:
    console.print(
        Rule("4 · delegation: three researchers in parallel, one worker in the background")
    )
    from ..delegation import ChildWorker, Spawner, SubAgent, TaskDispatcher, console_tools

    delay = 0.0 if fast else 0.5

    @tool(effect=ToolEffect.READ_ONLY)
    async def search(query: str) -> str:
        """Search travel guides."""
        await asyncio.sleep(delay * random.uniform(0.6, 1.2))
        return f"3 guides found for {query!r}"

    def researcher_model() -> Any:
        def answer(request: ModelRequest) -> Any:
            topic = request.messages[0].text
            if len(request.messages) == 1:
                return reply(tool_calls=[("search", {"query": topic})], usage=Usage(120, 10))
            return reply(
                f"On {topic}: the guides agree it is worth it in winter.", usage=Usage(180, 14)
            )

        return FunctionModel(answer, name="scripted-researcher")

    researcher = SubAgent(
        "researcher", "Researches one topic in travel guides.", researcher_model(), tools=[search]
    )
    runtime = Runtime()
    dispatcher = TaskDispatcher(ChildWorker(runtime))
    spawner = Spawner(researcher_model(), tools=[search], dispatcher=dispatcher)
    fan_out: list[tuple[str, dict[str, Any]]] = [
        ("researcher", {"task": "northern lights in Tromsø", "name": "aurora"}),
        ("researcher", {"task": "dog sledding near Tromsø", "name": "sledding"}),
        ("researcher", {"task": "fjord cruises in winter", "name": "fjords"}),
        (
            "spawn_agent",
            {"name": "prices", "task": "ferry prices", "tools": ["search"], "mode": "background"},
        ),
    ]

    def lead_answer(request: ModelRequest) -> Any:
        if len(request.messages) == 1:
            return reply(
                "Three questions in parallel, and a price check in the background.",
                tool_calls=fan_out,
                usage=Usage(500, 60),
            )
        heard = " ".join(m.text for m in request.messages if m.role == "user") + " ".join(
            r.content for m in request.messages for r in m.results
        )
        if "background agent 'prices'" in heard or "REPORT:" in heard:
            return reply(
                "Plan: aurora hunting and dog sledding around Tromsø, a fjord cruise on day two; "
                "the background price check came back with the ferry fares.",
                usage=Usage(1100, 40),
            )
        return reply(
            tool_calls=[("read_agent", {"agent": "prices", "wait": True})], usage=Usage(900, 12)
        )

    lead = FunctionModel(lead_answer, name="scripted-lead")
    agent = Agent(
        "lead",
        lead,
        "Delegate research, then synthesise.",
        tools=[researcher, spawner, *console_tools()],
    )
    printer = EventPrinter(console)
    runtime.background.emit = printer  # the background worker's lane shows too
    session = await runtime.create_session(agent)
    result = await session.run(
        "Plan three winter days around Tromsø.", emit=printer, options=RunOptions(max_rounds=8)
    )
    await dispatcher.drain()
    console.print(Panel(result.text, title="synthesis", border_style="green"))
    console.print(usage_table(result))
    await runtime.close()


def run_demo(args: Demo) -> int:
    """Run the scripted tour; returns the exit code."""
    console = terminal()
    console.print(
        Panel(
            "A [bold]scripted[/] demo: the model's replies are pre-written (no API key, no network);\n"
            "the runtime around them — tools, concurrency, strategies, events — is the real one.",
            title="taskloom demo",
            border_style="cyan",
        )
    )
    fast = args.fast
    asyncio.run(_part_parallel_and_strategy(console, fast))
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_part_approval(console, fast, f"sqlite:///{tmp}/demo.db"))
    asyncio.run(_part_background(console, fast))
    asyncio.run(_part_delegation(console, fast))
    return 0
