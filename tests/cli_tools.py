"""Tools the CLI tests load with `--tool cli_tools:NAME`."""

from __future__ import annotations

from taskloom import ToolEffect, tool


@tool(effect=ToolEffect.READ_ONLY)
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


@tool(needs_approval=True)
def book(what: str) -> str:
    """Book something (needs approval)."""
    return f"booked {what}"


@tool(effect=ToolEffect.READ_ONLY)
def echo(text: str) -> str:
    """Say the text back, byte for byte."""
    return text


@tool(needs_approval=True)
def pay(memo: str, amount: float, currency: str, destination: str) -> str:
    """Send a payment (needs approval)."""
    return f"paid {amount:.2f} {currency} to {destination}"
