"""The stored classes' faster `__init__` behaves as the one `dataclass` writes,
and a model's answer that echoes a credential never carries it, whatever
characters the credential holds (JSON escapes some of them)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import pytest

from fresh_process import run_fresh
from taskloom.entries import Entry
from taskloom.events import ToolCallStarted
from taskloom.messages import Message, ToolCall, ToolResult
from taskloom.models import ModelRequest, OpenAIChatModel
from taskloom.testing.fake_server import FakeServer

CLASSES = [ToolCall, ToolResult, Message, Entry, ToolCallStarted]


def reference(cls: type) -> type:
    """A frozen dataclass with slots and `cls`'s fields and `__post_init__`,
    its `__init__` the one `dataclass` writes."""
    spec = [
        (
            f.name,
            f.type,
            dataclasses.field(
                default=f.default,
                default_factory=f.default_factory,
                init=f.init,
                kw_only=f.kw_only,
            ),
        )
        for f in dataclasses.fields(cls)
    ]
    namespace = {"__post_init__": cls.__post_init__} if hasattr(cls, "__post_init__") else {}
    made: type = dataclasses.make_dataclass(
        f"Reference{cls.__name__}", spec, frozen=True, slots=True, namespace=namespace
    )
    return made


def values(obj: object) -> list[Any]:
    return [getattr(obj, f.name) for f in dataclasses.fields(obj)]  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_the_init_takes_the_arguments_and_defaults_of_the_dataclass_one(cls: type) -> None:
    ours, theirs = inspect.signature(cls).parameters, inspect.signature(reference(cls)).parameters
    assert list(ours) == list(theirs)
    for name, parameter in ours.items():
        other = theirs[name]
        assert parameter.kind == other.kind
        if other.default is inspect.Parameter.empty or repr(other.default) == "<factory>":
            assert repr(parameter.default) == repr(other.default)
        else:
            assert parameter.default is other.default


CALLS: list[tuple[type, tuple[Any, ...], dict[str, Any]]] = [
    (ToolCall, ("c1", "add", {"a": 1}), {}),
    (ToolCall, ("c1", "add"), {}),
    # Arguments JSON cannot carry are kept as text by __post_init__.
    (ToolCall, ("c2", "add", {"a": float("inf")}), {}),
    (ToolCall, (), {"id": "c3", "name": "nåme", "raw_arguments": "{", "provider_id": "p"}),
    (ToolResult, ("c1", "2"), {"is_error": True}),
    (Message, ("tool", (ToolResult("c1", "2"),)), {"model": "m"}),
    (Entry, ("message",), {}),
    (Entry, ("message", {"a": 1}, "r1", 3, 1.5), {}),
    (ToolCallStarted, (), {"call_id": "c1", "name": "add"}),
    (ToolCallStarted, (), {"call_id": "c1", "name": "add", "arguments": {"a": 1}, "origin": "o"}),
]


@pytest.mark.parametrize(("cls", "args", "kwargs"), CALLS)
def test_the_init_makes_what_the_dataclass_one_makes(
    cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    ours, theirs = cls(*args, **kwargs), reference(cls)(*args, **kwargs)
    assert values(ours) == values(theirs)
    assert dataclasses.replace(ours, **kwargs) == ours


def test_post_init_still_runs() -> None:
    odd = ToolCall("c2", "add", {"a": float("nan")})
    assert odd.arguments == {} and odd.raw_arguments is not None
    assert ToolCall("c1", "add", {"a": 1}).raw_arguments is None


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_wrong_arguments_are_refused_as_before(cls: type) -> None:
    with pytest.raises(TypeError):
        cls()
    with pytest.raises(TypeError):
        cls(*range(len(inspect.signature(cls).parameters) + 1))
    with pytest.raises(TypeError):
        cls(no_such_field=1)


def test_a_factory_default_is_fresh_per_instance_and_values_stay_frozen() -> None:
    one, two = Entry("message"), Entry("message")
    assert one.data == {} and one.data is not two.data
    calls = ToolCall("a", "f"), ToolCall("b", "f")
    assert calls[0].arguments is not calls[1].arguments
    started = ToolCallStarted(call_id="a", name="f"), ToolCallStarted(call_id="b", name="f")
    assert started[0].arguments is not started[1].arguments
    for value in (one, calls[0], started[0], Message.user("hi")):
        for f in dataclasses.fields(value):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(value, f.name, None)
    assert dataclasses.replace(calls[0], name="g") == ToolCall("a", "g")
    message = Message("tool", (ToolResult("c1", "2"),))
    assert Message.from_dict(message.to_dict()) == message


FIRST_USE = """
import dataclasses, inspect, json
from taskloom.events import RunStarted, ToolCallStarted
from taskloom.messages import ToolCall

class Tagged(ToolCall):
    __slots__ = ()

out = {"signature": str(inspect.signature(RunStarted))}
try:
    RunStarted(run_id="r1")
except TypeError as exc:
    out["refused"] = "agent" in str(exc)
first = Tagged("c1", "add", {"a": float("nan")})
out["subclass"] = [type(first).__name__, first.arguments, first.raw_arguments is not None]
made = RunStarted(run_id="r1", agent="a", origin="o")
out["made"] = [made.run_id, made.agent, made.origin, made.session_id]
out["after"] = str(inspect.signature(RunStarted))
out["replaced"] = dataclasses.replace(ToolCallStarted(call_id="c", name="f"), name="g").name
print(json.dumps(out))
"""


def test_a_fresh_process_first_instances_behave_as_the_dataclass_ones() -> None:
    # The first instance of a class in a process is where its faster
    # `__init__` is written: before it, the class reads and refuses as after.
    out = json.loads(run_fresh(FIRST_USE))
    assert out["signature"] == out["after"]
    assert "run_id" in out["signature"] and "agent" in out["signature"]
    assert out["refused"] is True
    assert out["subclass"] == ["Tagged", {}, True]
    assert out["made"] == ["r1", "a", "o", ""]
    assert out["replaced"] == "g"


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    async with FakeServer() as s:
        yield s


@pytest.mark.parametrize(
    "secret",
    ["sk-test-123", 'with"quote', "back\\slash", "new\nline", "naïve-κλειδί", "tab\t-key"],
)
async def test_a_credential_the_answer_echoes_is_redacted_whatever_its_characters(
    server: FakeServer, secret: str
) -> None:
    # The password of the base URL's user-info is a credential the model
    # sends (as a Basic header), so any character can be in it.
    server.script(
        FakeServer.reply(
            f"the key is {secret}!",
            tool_calls=[("add", {secret: 1, "k": [f"x{secret}y"]})],
        ),
        FakeServer.reply("nothing here"),
    )
    base_url = server.base_url.replace("://", f"://user:{quote(secret, safe='')}@")
    model = OpenAIChatModel("m", base_url=base_url, api_key="sk-other-key")
    assert secret in model.credentials
    answer = await model.request(ModelRequest(messages=[Message.user("hi")]))
    dumped = json.dumps(answer.message.to_dict(), ensure_ascii=False)
    assert secret not in dumped and secret not in repr(answer.message)
    assert answer.message.text == "the key is [redacted]!"
    (call,) = answer.message.tool_calls
    assert call.arguments == {"[redacted]": 1, "k": ["x[redacted]y"]}
    # An answer with no credential in it is as the server sent it.
    plain = await model.request(ModelRequest(messages=[Message.user("hi")]))
    assert plain.message.text == "nothing here"
