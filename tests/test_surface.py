"""The size of the faces: a `Session` offers the user's verbs and nothing of
the loop's, and no function of the loop takes more than six parameters (what
a run is travels as its scope and counters, not as loose values)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import taskloom.loop
from taskloom.runtime import Session

SESSION_VERBS = {
    "answer",
    "approve",
    "deny",
    "entries",
    "fork",
    "hold",
    "pending",
    "pending_input",
    "request_stop",
    "resume",
    "run",
    "set_model",
    "set_reasoning",
    "steer",
    "stream",
    "submit",
    "submit_resume",
    "tools",
    "transcript",
    "wait",
}
"""What docs and earlier contracts rely on (`tools`: the docs read what an MCP
server offered through it): nothing else is public on a Session."""

MAX_PARAMETERS = 6


def public_members(cls: type) -> set[str]:
    """The public methods and properties `cls` defines or inherits (not plain attributes)."""
    found: set[str] = set()
    for klass in cls.__mro__:
        if klass is object or klass.__module__ == "typing":
            continue
        for name, value in vars(klass).items():
            if name.startswith("_"):
                continue
            if inspect.isfunction(value) or isinstance(value, property | classmethod):
                found.add(name)
    return found


def test_a_session_offers_the_users_verbs_and_nothing_else() -> None:
    members = public_members(Session)
    assert members == SESSION_VERBS, (
        f"added: {sorted(members - SESSION_VERBS)}, missing: {sorted(SESSION_VERBS - members)}"
    )
    assert len(members) <= len(SESSION_VERBS)


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Parameters of a function, keyword-only and * / ** ones included, self and cls not."""
    args = node.args
    named = [*args.posonlyargs, *args.args]
    count = len(named) + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)
    if named and named[0].arg in ("self", "cls"):
        count -= 1
    return count


def test_no_function_of_the_loop_takes_more_than_six_parameters() -> None:
    folder = Path(taskloom.loop.__file__).parent
    too_many = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = parameters(node)
                if n > MAX_PARAMETERS:
                    too_many.append(f"{path.name}:{node.lineno} {node.name} ({n})")
    assert not too_many, too_many
