"""No code reaches the runtime's services by downcasting.

A tool gets the runtime offering it (or the service it needs) by being
bound to it (`taskloom.runtime.BindsRuntime`), typed; it never checks what
`ctx.runtime` or `ctx.agent` "really" is. Every module under src/taskloom is
parsed, and these are refused:

- `cast(...)`, in any form;
- `isinstance` or `getattr` on an attribute typed by the runtime (`x.runtime`,
  `x.agent`, `x.background`, `x.host`): its type says what it is;
- `isinstance(x, T)` with `T` the runtime or one of its services, except in
  the CLI, which checks what a user's `--app` factory returned;
- a parameter or attribute named like those annotated `Any` or `object`.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

TYPED = frozenset({"runtime", "agent", "background", "host"})
"""Attributes whose type is the runtime's (or one of its parts)."""

SERVICES = frozenset(
    {"Runtime", "Agent", "Session", "BackgroundService", "MCPConnections", "TaskCalls"}
)
"""What a downcast would check for."""

USER_INPUT = ("taskloom.cli",)
"""Packages that check objects a user's code handed them (not downcasts)."""

LOOSE = frozenset({"Any", "object"})


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _types(node: ast.expr) -> set[str]:
    """The class names an isinstance target names (a tuple or a union too)."""
    if isinstance(node, ast.Tuple):
        return set().union(*(_types(e) for e in node.elts))
    if isinstance(node, ast.BinOp):
        return _types(node.left) | _types(node.right)
    return {_name(node)}


def downcasts(module: str, source: str) -> list[str]:
    """Each downcast in `source` (the code of `module`), as "module:line what",
    in line order."""
    found: list[tuple[int, str]] = []
    user_input = module.startswith(USER_INPUT)
    for node in ast.walk(ast.parse(source)):
        what = _downcast(node, user_input)
        if what is not None:
            line = getattr(node, "lineno", 0)
            found.append((line, f"{module}:{line} {what}"))
    return [text for _, text in sorted(found)]


def _downcast(node: ast.AST, user_input: bool) -> str | None:
    if isinstance(node, ast.Call):
        return _downcasting_call(node, user_input)
    if isinstance(node, ast.arg):
        name, annotation = node.arg, node.annotation
    elif isinstance(node, ast.AnnAssign):
        name, annotation = _name(node.target), node.annotation
    else:
        return None
    if name in TYPED and annotation is not None and ast.unparse(annotation) in LOOSE:
        return f"{name}: {ast.unparse(annotation)}"
    return None


def _downcasting_call(call: ast.Call, user_input: bool) -> str | None:
    callee = _name(call.func)
    subject = call.args[0] if call.args else None
    if callee == "cast":
        return "casts"
    if (
        callee in ("isinstance", "getattr")
        and isinstance(subject, ast.Attribute)
        and subject.attr in TYPED
    ):
        return f"{callee}(...{subject.attr}, ...)"
    if (
        callee == "isinstance"
        and len(call.args) == 2
        and not user_input
        and _types(call.args[1]) & SERVICES
    ):
        return f"isinstance(..., {ast.unparse(call.args[1])})"
    return None


def scan(root: Path) -> list[str]:
    """Every downcast in the package under `root` (a `src` folder)."""
    problems: list[str] = []
    for path in sorted((root / "taskloom").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        problems += downcasts(module, path.read_text(encoding="utf-8"))
    return problems


def test_nothing_downcasts_the_runtime_or_its_services() -> None:
    assert scan(SRC) == []


def test_each_kind_of_downcast_is_found() -> None:
    source = """
from typing import Any, cast

def a(ctx):
    if not isinstance(ctx.runtime, Runtime):
        raise TypeError
    return cast(Runtime, ctx.runtime)

def b(runtime: Any, start):
    service = runtime.background
    if isinstance(service, BackgroundService | None):
        return getattr(start.runtime, "store", None)

class C:
    host: Any
"""
    found = downcasts("taskloom.example", source)
    assert [f.split(" ", 1)[1] for f in found] == [
        "isinstance(...runtime, ...)",
        "casts",
        "runtime: Any",
        "isinstance(..., BackgroundService | None)",
        "getattr(...runtime, ...)",
        "host: Any",
    ]


def test_the_cli_may_check_what_a_users_factory_returned() -> None:
    source = "def load(app):\n    if not isinstance(app, Runtime):\n        raise ValueError\n"
    assert downcasts("taskloom.cli.loading", source) == []
    assert downcasts("taskloom.delegation._x", source) != []
