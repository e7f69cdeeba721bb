"""Tool descriptions and per-parameter descriptions from any docstring style."""

from __future__ import annotations

from typing import Any

import pytest

from taskloom import ToolDefinitionWarning, tool


def _described(t: Any) -> tuple[str, dict[str, str | None]]:
    props = t.input_schema["properties"]
    return t.description, {name: p.get("description") for name, p in props.items()}


def test_google_style() -> None:
    @tool
    def convert(amount: float, currency: str = "EUR") -> str:
        """Convert an amount of money.

        Rates are fetched once a day.

        Args:
            amount (float): How much money, in dollars.
            currency: The ISO code to convert into,
                e.g. EUR or GBP.

        Returns:
            The converted amount.
        """
        return ""

    description, params = _described(convert)
    assert description == "Convert an amount of money.\n\nRates are fetched once a day."
    assert params == {
        "amount": "How much money, in dollars.",
        "currency": "The ISO code to convert into, e.g. EUR or GBP.",
    }


def test_sphinx_style() -> None:
    @tool
    def convert(amount: float, currency: str = "EUR") -> str:
        """Convert an amount of money.

        :param amount: How much money, in dollars.
        :param str currency: The ISO code to convert into,
            e.g. EUR or GBP.
        :returns: The converted amount.
        """
        return ""

    description, params = _described(convert)
    assert description == "Convert an amount of money."
    assert params == {
        "amount": "How much money, in dollars.",
        "currency": "The ISO code to convert into, e.g. EUR or GBP.",
    }


def test_numpy_style() -> None:
    @tool
    def convert(amount: float, currency: str = "EUR") -> str:
        """Convert an amount of money.

        Parameters
        ----------
        amount : float
            How much money, in dollars.
        currency : str
            The ISO code to convert into,
            e.g. EUR or GBP.

        Returns
        -------
        str
            The converted amount.
        """
        return ""

    description, params = _described(convert)
    assert description == "Convert an amount of money."
    assert params == {
        "amount": "How much money, in dollars.",
        "currency": "The ISO code to convert into, e.g. EUR or GBP.",
    }


def test_plain_docstring_and_none() -> None:
    @tool
    def ping() -> str:
        """Answer pong.

        Useful to check the tool path works.
        """
        return "pong"

    with pytest.warns(ToolDefinitionWarning, match="no docstring"):

        @tool
        def bare(x: int) -> int:
            return x

    assert ping.description == "Answer pong.\n\nUseful to check the tool path works."
    assert bare.description == ""
    assert "description" not in bare.input_schema["properties"]["x"]
