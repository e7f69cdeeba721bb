"""`taskloom demo`: an offline tour of a run, on a scripted model.

Everything the model "says" here is scripted; the runtime around it is the
real one: parallel tool execution, a round strategy, events, usage.
"""

from __future__ import annotations

import asyncio
import random

from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule

from .. import (
    Agent,
    RoundBoundary,
    RoundContext,
    RoundDecision,
    RunOptions,
    Runtime,
    ToolContext,
    ToolEffect,
    Usage,
    tool,
)
from ..models import ScriptedModel, reply
from .render import EventPrinter, usage_table

__all__ = ["run_demo"]

FORECASTS = {
    "Oslo": "4°C, light rain",
    "Bergen": "7°C, heavy rain",
    "Tromsø": "-3°C, clear, northern lights likely",
}


def _make_weather_tool(pause: float) -> object:
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


def run_demo(*, fast: bool = False) -> int:
    """Run the scripted tour; returns the exit code."""
    console = Console()
    console.print(
        Panel(
            "A [bold]scripted[/] demo: the model's replies are pre-written (no API key, no network);\n"
            "the runtime around them — tools, concurrency, strategies, events — is the real one.",
            title="taskloom demo",
            border_style="cyan",
        )
    )
    asyncio.run(_part_parallel_and_strategy(console, fast))
    return 0
