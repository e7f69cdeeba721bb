"""A tool of plain scalar parameters is served without pydantic, exactly as
pydantic would serve it: the same schema, the same validated arguments, the
same errors; and its docstring is read as `docstring_parser` reads it."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any, Optional

import docstring_parser
import pydantic
import pytest

from taskloom import tool
from taskloom.tools import Tool
from taskloom.tools._decorator import _arguments_model, _parse_docstring
from taskloom.tools._simple import _BASEMODEL_NAMES, plain_docstring

SOURCES = Path(__file__).resolve().parents[1] / "src"


def every_kind(
    a: int,
    b: str = "x",
    c: float = 1.5,
    d: bool = False,
    e: int | None = None,
    g: float = 2,
    h: Optional[str] = "q",  # noqa: UP045 (the spelling is what is tested)
    i: bool | None = True,
) -> int:
    """Do everything.

    Args:
        a: the a.
        c: the c
           continued.
    """
    return a


def nothing() -> None:
    """Nothing."""


def required_only(x: str, y: float | None) -> None:
    """x"""


def odd_defaults(s: str = None, n: int = -3, z: float = 0.0) -> None:  # type: ignore[assignment]  # noqa: RUF013
    """z"""


PLAIN = [every_kind, nothing, required_only, odd_defaults]


def pydantic_tool(fn: Any) -> tuple[type[pydantic.BaseModel], dict[str, Any]]:
    """What `@tool` built before: the pydantic model and its schema."""
    hints = typing.get_type_hints(fn)
    _, docs = _parse_docstring(fn.__doc__ or "")
    fields = {
        p.name: (hints[p.name], ... if p.default is p.empty else p.default, docs.get(p.name))
        for p in inspect.signature(fn).parameters.values()
    }
    return _arguments_model(fn.__name__, fields)


@pytest.mark.parametrize("fn", PLAIN, ids=lambda f: f.__name__)
def test_a_plain_signature_has_pydantics_schema_key_for_key(fn: Any) -> None:
    made = tool(fn)
    assert made._model is None and made._simple is not None
    _, schema = pydantic_tool(fn)
    assert json.dumps(made.input_schema) == json.dumps(schema)


ARGUMENTS: list[dict[str, Any]] = [
    {"a": 1},
    {"a": 1, "b": "y", "c": 2.5, "d": True, "e": 7, "g": 3.0, "h": None, "i": None},
    {"a": True},  # a bool for an int: pydantic converts it
    {"a": 1.0},
    {"a": "1"},
    {"a": 1, "c": 1},  # an int for a float: pydantic converts it
    {"a": 1, "g": 3},
    {"a": 1, "e": "4"},
    {"a": 1, "b": 5},
    {"a": 1, "d": "yes"},
    {"a": None},
    {},
    {"a": 1, "zz": 2},
    {"a": 10**30},
]


@pytest.mark.parametrize("arguments", ARGUMENTS, ids=json.dumps)
def test_validation_gives_what_pydantic_gives(arguments: dict[str, Any]) -> None:
    made = tool(every_kind)
    model, _ = pydantic_tool(every_kind)
    try:
        expected: Any = dict(model.model_validate(arguments).__dict__)
    except pydantic.ValidationError:
        expected = "invalid"
    try:
        got: Any = made.validate(arguments)
    except Exception as exc:
        got = "invalid" if type(exc).__name__ == "ArgumentsInvalid" else exc
    assert got == expected
    if isinstance(expected, dict):
        # Same keys in the same order, values of the same types.
        assert list(got) == list(expected)
        assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]


def test_invalid_arguments_get_pydantics_message() -> None:
    plain = tool(every_kind)
    model, schema = pydantic_tool(every_kind)
    via_pydantic = Tool("every_kind", "d", schema, every_kind, _arguments_model=model)
    for arguments in ({}, {"a": "x"}, {"a": 1, "zz": 2}):
        with pytest.raises(Exception) as plain_error:
            plain.validate(arguments)
        with pytest.raises(Exception) as pydantic_error:
            via_pydantic.validate(arguments)
        assert str(plain_error.value) == str(pydantic_error.value)


def annotated(a: typing.Annotated[int, "x"]) -> None:
    """x"""


def listed(a: list[int]) -> None:
    """x"""


def untyped(a) -> None:  # type: ignore[no-untyped-def]
    """x"""


def shadowing(json: str) -> None:
    """x"""


def union_first_none(a: None | int) -> None:  # noqa: RUF036
    """x"""


def mutable_default(a: str = "x", b: float = float("inf")) -> None:
    """x"""


@pytest.mark.parametrize(
    "fn",
    [annotated, listed, untyped, shadowing, union_first_none, mutable_default],
    ids=lambda f: f.__name__,
)
def test_anything_else_keeps_the_pydantic_model(fn: Any) -> None:
    with pytest.warns() if fn in (untyped, shadowing) else _nothing():
        made = tool(fn)
    assert made._simple is None and made._model is not None


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_the_names_pydantic_refuses_or_warns_of_are_known() -> None:
    public = {n for n in dir(pydantic.BaseModel) if not n.startswith(("_", "model_"))}
    assert public <= _BASEMODEL_NAMES


DOCSTRINGS = [
    "Add two integers.",
    "Add two integers.\n\nThe longer story,\nover two lines.\n\nAnd a third paragraph.",
    "First line\nsecond line of the summary",
    "Trailing spaces.   \n\n  indented more  ",
    "Dashes - inside - text are fine.",
    "Args:\n    a: the a.",
    ":param a: the a.",
    "@param a: the a.",
    "Summary.\n\nParameters\n----------\na : int\n    the a.",
    "Summary.\n\nNotes\n-----\nnothing here",
    "Summary.\n\nReturns\n=======\nnothing",
]


@pytest.mark.parametrize("doc", DOCSTRINGS)
def test_a_docstring_without_sections_reads_as_docstring_parser_reads_it(doc: str) -> None:
    doc = inspect.cleandoc(doc)
    plain = plain_docstring(doc)
    if plain is None:
        return  # left to docstring_parser
    parsed = docstring_parser.parse(doc)
    assert parsed.meta == []
    expected = "\n\n".join(p for p in (parsed.short_description, parsed.long_description) if p)
    assert plain == expected.strip()


def test_a_run_with_plain_tools_never_imports_pydantic_or_docstring_parser() -> None:
    code = (
        "import sys\n"
        "from taskloom import Agent, tool\n"
        "from taskloom.models import ScriptedModel, reply\n"
        "def add(a: int, b: int = 1) -> int:\n"
        "    '''Add two integers.'''\n"
        "    return a + b\n"
        "model = ScriptedModel([reply(tool_calls=[('add', {'a': 1, 'b': 2})]), reply('3')])\n"
        "agent = Agent('adder', model, 'Add.', tools=[tool(add)])\n"
        "assert agent.run_sync('1 + 2?').text == '3'\n"
        "print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'docstring_parser'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(SOURCES), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
