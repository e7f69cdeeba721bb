"""What a tool definition that a model cannot use, or can use only by guessing, is told.

A parameter type with no JSON schema is refused in one line naming the
parameter and its type (not pydantic's advice about `arbitrary_types_allowed`,
which cannot help: a model sends JSON). An untyped parameter or a tool with
no description works, with a `ToolDefinitionWarning` at the function's line.
"""

from __future__ import annotations

import socket
import warnings

import pytest

from taskloom import ConfigurationError, ToolDefinitionWarning, tool


def _defined(define: object) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        define()  # type: ignore[operator]
    return [w for w in caught if issubclass(w.category, ToolDefinitionWarning)]


def test_a_parameter_a_model_cannot_send_is_named_in_one_line() -> None:
    with pytest.raises(ConfigurationError) as caught:

        @tool
        def connect(host: str, sock: socket.socket) -> str:
            """Use a socket."""
            return host

    message = str(caught.value)
    assert "parameter 'sock'" in message and "socket.socket" in message
    assert "arbitrary_types_allowed" not in message
    assert "\n" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_an_untyped_parameter_warns_at_the_functions_line() -> None:
    def define() -> None:
        @tool
        def lookup(key, limit: int = 3) -> str:  # type: ignore[no-untyped-def]
            """Look a key up."""
            return str(key)

    found = _defined(define)
    assert [str(w.message) for w in found] == [
        "tool 'lookup': parameter 'key' has no type annotation: "
        "the model is told any JSON value will do"
    ]
    assert found[0].filename == __file__


def test_a_tool_without_a_description_warns_unless_given_one() -> None:
    def bare() -> None:
        @tool
        def ping(n: int) -> int:
            return n

    def described() -> None:
        @tool(description="Echo a number.")
        def pong(n: int) -> int:
            return n

    def documented() -> None:
        @tool
        def pang(n: int) -> int:
            """Echo a number."""
            return n

    assert [str(w.message) for w in _defined(bare)] == [
        "tool 'ping': it has no docstring or description=: the model sees only its name"
    ]
    assert _defined(described) == []
    assert _defined(documented) == []


def test_a_definition_built_again_warns_once() -> None:
    def lookup(key: str) -> str:
        return key

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):
            tool(lookup)
    found = [w for w in caught if issubclass(w.category, ToolDefinitionWarning)]
    assert len(found) == 1, [str(w.message) for w in found]
