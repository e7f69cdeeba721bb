"""A tool of plain scalar parameters is served without pydantic, exactly as
pydantic would serve it: the same schema, the same validated arguments, the
same errors; and its docstring is read as `docstring_parser` reads it."""

from __future__ import annotations

import inspect
import json
import typing
import warnings
from typing import Any, Optional

import docstring_parser
import pydantic
import pytest

from fresh_process import run_fresh
from taskloom import ConfigurationError, tool
from taskloom.tools import ArgumentsInvalid


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


def descriptions(doc: str) -> tuple[str, dict[str, str]]:
    """A docstring's description and parameters, as `docstring_parser` reads them."""
    parsed = docstring_parser.parse(inspect.cleandoc(doc))
    text = "\n\n".join(p for p in (parsed.short_description, parsed.long_description) if p)
    params = {
        p.arg_name: " ".join(line.strip() for line in p.description.splitlines())
        for p in parsed.params
        if p.description
    }
    return text.strip(), params


def pydantic_tool(fn: Any) -> tuple[type[pydantic.BaseModel], dict[str, Any]]:
    """The pydantic model of `fn`'s parameters, as `@tool` builds one, and its schema."""
    hints = typing.get_type_hints(fn)
    _, docs = descriptions(fn.__doc__ or "")
    model = pydantic.create_model(  # type: ignore[call-overload]
        f"{fn.__name__}_arguments",
        __config__=pydantic.ConfigDict(extra="forbid"),
        **{
            p.name: (
                hints.get(p.name, Any),
                pydantic.Field(
                    ... if p.default is p.empty else p.default, description=docs.get(p.name)
                ),
            )
            for p in inspect.signature(fn).parameters.values()
        },
    )
    schema = model.model_json_schema()
    schema.pop("title")
    for prop in schema["properties"].values():
        prop.pop("title")
    return model, schema


def imports_pydantic(source: str, name: str) -> bool:
    """Whether decorating the function `name` defined by `source` (and
    validating its arguments `{}`) imports pydantic, in a fresh process."""
    code = (
        "import sys, typing, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from typing import Annotated, Optional\n"
        "from taskloom import tool\n"
        f"{source}\n"
        "assert 'pydantic' not in sys.modules\n"
        f"made = tool({name})\n"
        "print('pydantic' in sys.modules)\n"
    )
    return run_fresh(code).strip() == "True"


@pytest.mark.parametrize("fn", PLAIN, ids=lambda f: f.__name__)
def test_a_plain_signature_has_pydantics_schema_key_for_key(fn: Any) -> None:
    _, schema = pydantic_tool(fn)
    assert json.dumps(tool(fn).input_schema) == json.dumps(schema)
    assert not imports_pydantic(inspect.getsource(fn), fn.__name__)


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
    {"a": 1, "other": 2},
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
    except ArgumentsInvalid:
        got = "invalid"
    assert got == expected
    if isinstance(expected, dict):
        # Same keys in the same order, values of the same types.
        assert list(got) == list(expected)
        assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]


def every_kind_and_a_list(
    a: int,
    b: str = "x",
    c: float = 1.5,
    d: bool = False,
    e: int | None = None,
    g: float = 2,
    h: Optional[str] = "q",  # noqa: UP045
    i: bool | None = True,
    more: list[int] | None = None,
) -> int:
    """The same, with one parameter that is not plain: pydantic serves it."""
    return a


def test_invalid_arguments_get_pydantics_message() -> None:
    plain, served_by_pydantic = tool(every_kind), tool(every_kind_and_a_list)
    for arguments in ({}, {"a": "x"}, {"a": 1, "other": 2}, {"a": 1, "c": "many"}):
        with pytest.raises(ArgumentsInvalid) as plain_error:
            plain.validate(arguments)
        with pytest.raises(ArgumentsInvalid) as pydantic_error:
            served_by_pydantic.validate(arguments)
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
    assert imports_pydantic(inspect.getsource(fn), fn.__name__)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, schema = pydantic_tool(fn)
        assert tool(fn).input_schema == schema


@pytest.mark.parametrize(
    "name", sorted(n for n in dir(pydantic.BaseModel) if not n.startswith(("_", "model_")))
)
def test_a_parameter_named_as_a_pydantic_attribute_warns_as_pydantic_does(name: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"def f({name}: str) -> None:\n    'x'\n", namespace)
    fn = namespace["f"]
    with warnings.catch_warnings(record=True) as by_pydantic:
        warnings.simplefilter("always")
        try:
            pydantic.create_model("f_arguments", **{name: (str, ...)})  # type: ignore[call-overload]
        except Exception:
            refused = True
        else:
            refused = False
    with warnings.catch_warnings(record=True) as by_tool:
        warnings.simplefilter("always")
        if refused:
            with pytest.raises(ConfigurationError):
                tool(fn)
        else:
            tool(fn)
    assert [str(w.message) for w in by_tool] == [str(w.message) for w in by_pydantic]


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


@pytest.mark.filterwarnings("ignore::taskloom.ToolDefinitionWarning")
@pytest.mark.parametrize("doc", DOCSTRINGS)
def test_a_docstring_reads_as_docstring_parser_reads_it(doc: str) -> None:
    def fn(a: int) -> None:
        pass

    fn.__doc__ = doc
    text, params = descriptions(doc)
    made = tool(fn)
    assert made.description == text
    assert made.input_schema["properties"]["a"].get("description") == params.get("a")


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
    assert run_fresh(code).strip() == "[]"
