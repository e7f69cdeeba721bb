"""The codec's faster `__init__` for frozen dataclasses with slots, and its
one-dump check for secrets: each behaves as what it replaces."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest

from taskloom._codec import fast_init
from taskloom._redact import mentions, redact_value
from taskloom.entries import Entry
from taskloom.messages import Message, TextBlock, ToolCall, ToolResult


@fast_init
@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    items: list[int] = field(default_factory=list)
    size: int = 3
    kind: str = field(default="shape", init=False)
    seen: list[str] = field(default_factory=list, init=False)
    tag: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError("size below 0")
        self.seen.append(self.name)


@dataclass(frozen=True, slots=True)
class Plain:
    name: str
    items: list[int] = field(default_factory=list)
    size: int = 3
    kind: str = field(default="shape", init=False)
    seen: list[str] = field(default_factory=list, init=False)
    tag: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError("size below 0")
        self.seen.append(self.name)


def test_fast_init_takes_the_same_arguments_as_the_dataclass_init() -> None:
    assert Shape.__init__ is not Plain.__init__
    assert list(inspect.signature(Shape).parameters) == list(inspect.signature(Plain).parameters)
    for args, kwargs in [
        (("a",), {}),
        (("a", [1]), {"size": 5}),
        ((), {"name": "b", "tag": "t"}),
    ]:
        ours, theirs = Shape(*args, **kwargs), Plain(*args, **kwargs)
        assert dataclasses.astuple(ours) == dataclasses.astuple(theirs)
    with pytest.raises(TypeError):
        Shape("a", [1], 5, "positional tag")  # type: ignore[misc]
    with pytest.raises(TypeError):
        Shape()  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="size below 0"):
        Shape("a", size=-1)


def test_fast_init_makes_a_fresh_default_per_instance_and_stays_frozen() -> None:
    one, two = Shape("a"), Shape("b")
    assert one.items is not two.items
    assert one.seen == ["a"] and two.seen == ["b"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.name = "c"  # type: ignore[misc]


def test_stored_values_keep_their_constructors() -> None:
    call = ToolCall("c1", "add", {"a": 1})
    assert call.type == "tool_call" and call.raw_arguments is None
    # Arguments JSON cannot carry are still kept as text by __post_init__.
    odd = ToolCall("c2", "add", {"a": float("nan")})
    assert odd.arguments == {} and odd.raw_arguments is not None
    entry = Entry("message")
    assert entry.data == {} and entry.data is not Entry("message").data
    message = Message("tool", (ToolResult("c1", "2"),))
    assert Message.from_dict(message.to_dict()) == message


@pytest.mark.parametrize(
    "secret", ["sk-test-123", 'with"quote', "back\\slash", "new\nline", "naïve-κλειδί", "tab\t"]
)
def test_mentions_is_never_false_where_redaction_changes_something(secret: str) -> None:
    values: list[Any] = [
        {"text": f"the key is {secret}!"},
        {"blocks": [{"arguments": {secret: 1}}]},
        {"blocks": [{"arguments": {"k": [f"x{secret}y"]}}]},
        {"text": "nothing here"},
        Message("assistant", (TextBlock(f"echo {secret}"),)).to_dict(),
    ]
    for value in values:
        changed = redact_value(value, (secret,)) != value
        if changed:
            assert mentions(value, (secret,))
    assert not mentions({"text": "nothing here"}, ("sk-test-123",))
    assert not mentions({"text": "anything"}, ())
