"""taskloom's values compare, hash, print and refuse assignment exactly as
the methods `dataclass` writes make them do, whether or not a method has
been called before (they are compiled at their first call), and a plain
import compiles none of them but `__init__`."""

from __future__ import annotations

import json

from fresh_process import run_fresh

# Run in a fresh process so that no method has been compiled yet: each check
# compares a taskloom value with a dataclass of the same fields built in the
# child's `__main__` (which `dataclass` compiles eagerly), twice.
CHILD = """
import dataclasses, json
from taskloom.messages import Message, TextBlock, ToolCall, Usage
from taskloom.results import ToolSpec

def reference(cls):
    spec = [(f.name, f.type, dataclasses.field(default=None)) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, spec, frozen=True, slots=True)

def outcome(thunk):
    try:
        return ["ok", thunk()]
    except Exception as error:
        return [type(error).__name__, str(error)]

def behaviour(a, b, c):
    first = dataclasses.fields(a)[0].name
    return [
        repr(a), a == b, a != b, a == c, a != c, a == 1,
        outcome(lambda: hash(a) == hash(b)),
        outcome(lambda: setattr(a, "x", 1)),
        outcome(lambda: setattr(a, first, 1)),
        outcome(lambda: delattr(a, first)),
    ]

cases = [
    (ToolCall, dict(id="c1", name="add", arguments={"a": 1})),
    (Usage, dict(input_tokens=3, output_tokens=4)),
    (TextBlock, dict(text="hi")),
    (ToolSpec, dict(name="add", description="Add.", input_schema={})),
]
out = []
for cls, kwargs in cases:
    ref = reference(cls)
    kwargs_b = dict(kwargs)
    other = {k: (v + "!" if isinstance(v, str) else v) for k, v in kwargs.items()}
    ours = [cls(**kwargs), cls(**kwargs_b), cls(**other)]
    theirs = [ref(**{f.name: getattr(x, f.name) for f in dataclasses.fields(x)}) for x in ours]
    for _ in range(2):
        mine, want = behaviour(*ours), behaviour(*theirs)
        out.append([cls.__name__, mine == want, mine, want])
text = Message("user", [TextBlock("x")])
out.append(["Message", text == Message("user", [TextBlock("x")]), repr(text)[:8], True, True])
print(json.dumps(out))
"""


def test_values_behave_as_the_methods_dataclass_writes_make_them_before_and_after_first_use() -> (
    None
):
    results = json.loads(run_fresh(CHILD))
    assert len(results) == 9
    for name, same, mine, want in results[:-1]:
        assert same, (name, mine, want)
    assert results[-1][:3] == ["Message", True, "Message("]


def test_a_plain_import_compiles_no_method_of_its_values_but_init() -> None:
    code = """
import builtins, dataclasses, json
compiled = []
real_exec = builtins.exec
def counting(source, *args, **kwargs):
    if isinstance(source, str) and source.startswith("def __create_fn__("):
        name = source.split(" def ", 1)[1].split("(", 1)[0]
        globals_ = args[0] if args else {}
        compiled.append([globals_.get("__name__", ""), name])
    return real_exec(source, *args, **kwargs)
builtins.exec = counting
import taskloom
from taskloom.messages import ToolCall
builtins.exec = real_exec
ours = [name for module, name in compiled if module.startswith("taskloom")]
call = ToolCall(id="c1", name="add", arguments={})
print(json.dumps([sorted(set(ours)), len(ours), call == ToolCall(id="c1", name="add", arguments={})]))
"""
    names, count, equal = json.loads(run_fresh(code))
    assert names == ["__init__"]
    assert count > 20
    assert equal


def test_another_modules_dataclasses_are_compiled_as_dataclass_does() -> None:
    code = """
import dataclasses, json
import taskloom
@dataclasses.dataclass(frozen=True)
class Point:
    x: int
print(json.dumps([Point.__eq__.__code__.co_name, Point.__repr__.__wrapped__.__code__.co_name]))
"""
    assert json.loads(run_fresh(code)) == ["__eq__", "__repr__"]


def test_a_methods_first_call_leaves_nothing_for_the_collector() -> None:
    # A stand-in replaced by its method, and `__init__`'s by the faster one,
    # are freed by reference counting (a run leaves no cycles: test_no_cycles).
    code = """
import gc
from taskloom.messages import ToolCall, Usage
gc.collect()
gc.disable()
a, b = Usage(input_tokens=1), Usage(input_tokens=1)
outcome = [a == b, hash(a) == hash(b), repr(ToolCall(id="c", name="n", arguments={}))[:9]]
print(gc.collect(), outcome)
"""
    assert run_fresh(code).split() == ["0", "[True,", "True,", "'ToolCall(']"]


def test_a_value_that_holds_itself_prints_as_dataclass_prints_it() -> None:
    # `dataclass` guards `__repr__` against recursion (`recursive_repr`);
    # compiling it at first call must keep the guard, the first time and after.
    code = """
import dataclasses
from taskloom.messages import ToolCall
Ref = dataclasses.make_dataclass(
    "ToolCall",
    [(f.name, object, dataclasses.field(init=f.init, default=f.default))
     for f in dataclasses.fields(ToolCall)],
    frozen=True, slots=True,
)
def looped(cls):
    value = cls(id="c1", name="add", arguments={})
    object.__setattr__(value, "raw_arguments", (value,))  # a cycle through a tuple
    return value
ours, theirs = looped(ToolCall), looped(Ref)
print(repr(ours) == repr(theirs) and repr(ours) == repr(theirs) and "..." in repr(ours))
"""
    assert run_fresh(code).strip() == "True"
