"""No module of one taskloom package imports another package's private
module, and no module reaches into another module's private attributes; the
test suite keeps to taskloom's public face altogether.

A package's underscored modules (`taskloom.models._base`) are how it is
built, not what it offers: another package (`taskloom.loop`, or a module of
`taskloom` itself such as `taskloom.agent`) imports what the package's
`__init__` exports, so a package can move its insides without breaking its
neighbours. Every module under src/taskloom is parsed (imports under
`TYPE_CHECKING` and inside functions included).

The same holds one level down, for attributes: `obj._name` (or the name
given as a string to `getattr`, `setattr`, `hasattr`, `delattr`, or
monkeypatch's) is a reach when `obj` is not `self`, `cls` or `super()` and
no class of the module itself defines `_name` (assigns it, declares it in
`__slots__`, or defines it as a method or class attribute). Read
statically, a name the module also defines for itself hides a reach; that
is the check's blind spot, not a licence.

Tests (every module under tests/, helper scripts included) are held to what
a user may use: they import no underscored module or name of taskloom at all
(`taskloom._extras` neither), name none in a string (a monkeypatch or mock
target, `sys.modules`, `importlib`), and reach no private attribute
(`obj._name`, or `getattr`/`setattr`/`monkeypatch.setattr` by name) that
taskloom's own code defines, nor one the test suite does not define for its
own objects. A test that needs a knob or a view asks the package for a
public one.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
TESTS = ROOT / "tests"


@cache
def parsed(path: Path) -> tuple[ast.Module, list[ast.AST]]:
    """The module at `path`, parsed, and every node of it (each file is read once)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return tree, list(ast.walk(tree))


def module_name(path: Path) -> tuple[str, bool]:
    """The dotted name of the module at `path` (under src/ or the repository),
    and whether it is a package."""
    base = SRC if path.is_relative_to(SRC) else ROOT
    parts = list(path.relative_to(base).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def top_package(module: str) -> str | None:
    """The top-level package of taskloom a module belongs to (`taskloom.loop`
    for `taskloom.loop._run`); None for a module of `taskloom` itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 and parts[0] == "taskloom" else None


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def foreign_private(importer: str, target: str) -> bool:
    """Whether `target` is a private module or name of taskloom that `importer`
    may not use: inside another top-level package than `importer`'s
    (`taskloom.<pkg>.(...)._<x>`, with `<pkg>` not the importer's); for an
    importer outside taskloom (a test), any underscored part at all."""
    parts = target.split(".")
    if len(parts) < 2 or parts[0] != "taskloom":
        return False
    if importer.partition(".")[0] != "taskloom":
        return any(is_private(part) for part in parts[1:])
    if len(parts) < 3:
        return False
    owner = ".".join(parts[:2])
    if owner == top_package(importer) and importer != "taskloom":
        return False
    return any(is_private(part) for part in parts[2:])


def violations(module: str, is_package: bool, source: str) -> list[str]:
    """Each import in `source` (the code of `module`) of a private module or
    name it may not use, as "module:line imports target"."""
    return _import_violations(module, is_package, list(ast.walk(ast.parse(source))))


def _import_violations(module: str, is_package: bool, nodes: Sequence[ast.AST]) -> list[str]:
    package = module if is_package else module.rpartition(".")[0]
    found: list[str] = []
    for node in nodes:
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            targets = [origin, *(f"{origin}.{alias.name}" for alias in node.names)]
        for target in targets:
            if foreign_private(module, target):
                found.append(f"{module}:{node.lineno} imports {target}")  # type: ignore[attr-defined]
                break
    return found


def test_no_module_imports_another_packages_private_module() -> None:
    problems: list[str] = []
    checked = 0
    for path in sorted((SRC / "taskloom").rglob("*.py")):
        module, is_package = module_name(path)
        checked += 1
        problems += _import_violations(module, is_package, parsed(path)[1])
    assert checked > 100  # the walk found the package
    assert problems == [], "import what the package's __init__ exports:\n" + "\n".join(problems)


def test_the_check_tells_a_neighbours_insides_from_a_package_s_own() -> None:
    def check(module: str, source: str, *, is_package: bool = False) -> list[str]:
        return violations(module, is_package, source)

    assert check("taskloom.loop._run", "from ..models._base import Model\n") == [
        "taskloom.loop._run:1 imports taskloom.models._base"
    ]
    assert check("taskloom.agent", "from .loop._output import OUTPUT_TOOL\n")
    assert check("taskloom", "from .models._retry import RetryPolicy\n", is_package=True)
    assert check("taskloom.cli.sessions", "from ..delegation import _children\n")
    assert check("taskloom.cli.sessions", "from taskloom.delegation import _hidden\n")
    assert check("taskloom.tracing._otel", "import taskloom.loop._result\n")
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..loop._port import X\n"
    assert check("taskloom.tracing._content", typed)
    # A package's own insides, public names, the root's shared modules and
    # dunders are fine.
    assert check("taskloom.loop._run", "from ._log import SessionLog\n") == []
    assert check("taskloom.loop", "from ._log import SessionLog\n", is_package=True) == []
    assert check("taskloom.loop._run", "from ..models import Model\n") == []
    assert check("taskloom.loop._run", "from .._control import RunControls\n") == []
    assert check("taskloom.mcp._serve", "from .. import __version__\n") == []
    assert check("taskloom.backends.memory._backend", "from .._backend import Backend\n") == []


# Private attributes of the standard library and of third-party code that
# their own documentation offers, or that taskloom reaches on purpose, each
# with why.
FOREIGN_PRIVATE_ALLOWED = {
    "_exit": "os._exit: leave a forked child without running the parent's cleanup",
    "_getframe": "sys._getframe: the caller's module for a tool's schema names",
    "_replace": "namedtuple's documented copy-with-changes",
    "_value2member_map_": "enum's value lookup without an exception per miss",
    "_stamp": "the MCP SDK stamps raw requests; one function sends a task request below its check",
    "_dispatcher": "the same MCP SDK request, sent raw",
}


def own_private_names(nodes: Iterable[ast.AST]) -> set[str]:
    """The private attribute names a module (all its `nodes`) defines for its own objects."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                targets = (
                    item.targets
                    if isinstance(item, ast.Assign)
                    else [item.target]
                    if isinstance(item, ast.AnnAssign)
                    else []
                )
                names.update(t.id for t in targets if isinstance(t, ast.Name))
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets
                ):
                    names.update(
                        e.value
                        for e in ast.walk(item.value)
                        if isinstance(e, ast.Constant) and isinstance(e.value, str)
                    )
    return {name for name in names if is_private(name)}


def _private_attributes(nodes: Sequence[ast.AST]) -> Iterator[tuple[int, str, str]]:
    """Each private attribute read or written on an object other than `self`,
    `cls` or `super()`, as (line, name, how it reads): from `obj._name`, and
    from `getattr`/`setattr`/`hasattr`/`delattr` (monkeypatch's too) given
    the name as a string."""
    for node in nodes:
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and ast.unparse(owner.func) == "super":
                continue
            yield node.lineno, node.attr, ast.unparse(node)
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            name = node.args[1]
            if (
                called in ("getattr", "setattr", "hasattr", "delattr")
                and isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and is_private(name.value)
            ):
                yield node.lineno, name.value, f"{ast.unparse(node.args[0])}.{name.value}"


def attribute_reaches(module: str, source: str) -> list[str]:
    """Each `obj._name` in `source` that reaches a private attribute the module
    does not define itself, as "module:line reaches obj._name"."""
    return _attribute_reaches(module, list(ast.walk(ast.parse(source))))


def _attribute_reaches(module: str, nodes: Sequence[ast.AST]) -> list[str]:
    own = own_private_names(nodes)
    return [
        f"{module}:{line} reaches {shown}"
        for line, name, shown in _private_attributes(nodes)
        if name not in own and name not in FOREIGN_PRIVATE_ALLOWED
    ]


def test_no_module_reaches_into_another_modules_private_attributes() -> None:
    problems: list[str] = []
    for path in sorted((SRC / "taskloom").rglob("*.py")):
        module, _ = module_name(path)
        problems += _attribute_reaches(module, parsed(path)[1])
    assert problems == [], "use the other module's public face:\n" + "\n".join(problems)


def test_the_attribute_check_tells_a_reach_from_a_module_s_own() -> None:
    reach = "def f(queue):\n    return queue._pool\n"
    assert attribute_reaches("taskloom.x", reach) == ["taskloom.x:2 reaches queue._pool"]
    own = "class Q:\n    __slots__ = ('_pool',)\n\ndef f(q):\n    return q._pool\n"
    assert attribute_reaches("taskloom.x", own) == []
    assigned = "class Q:\n    def __init__(self):\n        self._pool = 1\n    def same(self, other):\n        return other._pool\n"
    assert attribute_reaches("taskloom.x", assigned) == []
    method = "class Q:\n    def _go(self): ...\n\ndef f(q):\n    q._go()\n"
    assert attribute_reaches("taskloom.x", method) == []
    assert (
        attribute_reaches("taskloom.x", "class A(B):\n    def f(self):\n        super()._g()\n")
        == []
    )
    assert attribute_reaches("taskloom.x", "import os\nos._exit(0)\n") == []
    assert attribute_reaches("taskloom.x", "x.__class__\n") == []


# ---------------------------------------------------------------- the test suite

STRING_INPUTS = {
    "tests.test_package_boundaries": "feeds private module names to its own checks",
    "tests.test_no_downcasts": "feeds a private module's name to its own check",
}
"""Test modules whose strings name private modules as data for a checker, never to reach them."""

_DOTTED = re.compile(r"\btaskloom(?:\.\w*)+")


def _strings(nodes: Sequence[ast.AST]) -> Iterator[tuple[int, str]]:
    """Each string but the docstrings, as (line, text); an f-string with `{}`
    for each of its fields."""
    skipped: set[int] = set()
    for node in nodes:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skipped.add(id(body[0].value))
        elif isinstance(node, ast.JoinedStr):
            skipped.update(id(part) for part in node.values)
    for node in nodes:
        if isinstance(node, ast.JoinedStr):
            text = "".join(
                part.value if isinstance(part, ast.Constant) else "{}" for part in node.values
            )
            yield node.lineno, text
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skipped
        ):
            yield node.lineno, node.value


def _named_in_strings(module: str, nodes: Sequence[ast.AST]) -> list[str]:
    """Each string that names a private module of taskloom (a monkeypatch or
    mock target, a `sys.modules` key, an `importlib` name), as "module:line
    names target"."""
    return [
        f"{module}:{line} names {target}"
        for line, text in _strings(nodes)
        for target in _DOTTED.findall(text)
        if foreign_private(module, target)
    ]


def _module_private_names(tree: ast.Module) -> set[str]:
    """The private names a module defines at its top level."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return {name for name in names if is_private(name)}


@cache
def taskloom_private_names() -> frozenset[str]:
    """Every private name taskloom's own code defines, for its objects or its modules."""
    names: set[str] = set()
    for path in (SRC / "taskloom").rglob("*.py"):
        tree, nodes = parsed(path)
        names |= own_private_names(nodes) | _module_private_names(tree)
    return frozenset(names)


def suite_modules() -> list[Path]:
    """Every Python module under tests/ (the recorded corpora are data)."""
    return sorted(p for p in TESTS.rglob("*.py") if "corpora" not in p.relative_to(TESTS).parts)


def suite_reaches(
    module: str, source: str, suite_own: Iterable[str], taskloom_own: Iterable[str]
) -> list[str]:
    """What the test module `module` reaches of taskloom's insides: imports,
    names in strings, and private attributes that taskloom defines
    (`taskloom_own`) or that the test suite (`suite_own`) does not."""
    nodes = list(ast.walk(ast.parse(source)))
    return _suite_reaches(module, nodes, set(suite_own) - set(taskloom_own))


def _suite_reaches(module: str, nodes: Sequence[ast.AST], mine: set[str]) -> list[str]:
    reaches = [
        f"{module}:{line} reaches {shown}"
        for line, name, shown in _private_attributes(nodes)
        if name not in mine and name not in FOREIGN_PRIVATE_ALLOWED
    ]
    strings = [] if module in STRING_INPUTS else _named_in_strings(module, nodes)
    return [*_import_violations(module, False, nodes), *strings, *reaches]


def test_no_test_uses_taskloom_s_insides() -> None:
    modules = {module_name(path)[0]: path for path in suite_modules()}
    assert len(modules) > 100 and "tests.mcp.test_mcp_processes" in modules
    suite_own: set[str] = set()
    for path in modules.values():
        tree, nodes = parsed(path)
        suite_own |= own_private_names(nodes) | _module_private_names(tree)
    mine = suite_own - taskloom_private_names()
    problems = [
        problem
        for module, path in modules.items()
        for problem in _suite_reaches(module, parsed(path)[1], mine)
    ]
    assert problems == [], "test through taskloom's public face:\n" + "\n".join(problems)


def test_the_suite_check_refuses_every_way_into_taskloom_s_insides() -> None:
    def check(source: str, own: Iterable[str] = ()) -> list[str]:
        return suite_reaches("tests.test_x", source, own, taskloom_own={"_meta", "_db"})

    assert check("from taskloom.models._resolve import PRESETS\n") == [
        "tests.test_x:1 imports taskloom.models._resolve"
    ]
    assert check("from taskloom import _extras\n")
    assert check("from taskloom._extras import EXTRAS\n")
    assert check("import taskloom.tools._tool as tool_module\n")
    assert check("from taskloom.mcp import _taskcalls\n")
    assert check("from taskloom.loop import _private_helper\n")
    assert check('monkeypatch.setattr("taskloom.tools._tool.SLOW_INLINE_CALL", 0.01)\n') == [
        "tests.test_x:1 names taskloom.tools._tool.SLOW_INLINE_CALL"
    ]
    assert check('monkeypatch.setitem(sys.modules, "taskloom.models._gemini", fake)\n')
    assert check('importlib.import_module(f"taskloom.models._{name}")\n')
    assert check('MODULES = [("anthropic", "taskloom.models._anthropic")]\n')
    # Attributes taskloom defines are its own, whoever else defines the name.
    assert check("def held(store):\n    return len(store._meta)\n") == [
        "tests.test_x:2 reaches store._meta"
    ]
    assert check("def f(store):\n    return store._meta\n", own={"_meta"})
    assert check('getattr(part, "_db", None)\n') == ["tests.test_x:1 reaches part._db"]
    assert check('monkeypatch.setattr(connection, "_BACKOFF", (0.0,))\n')
    assert check("def f(process):\n    return process._transport\n")  # nobody's own
    # What the suite makes for itself, public names, docstrings and the
    # standard library's documented privates are fine.
    fixture = "class Probe:\n    def __init__(self):\n        self._probed = 0\n"
    assert check(fixture + "def seen(p):\n    return p._probed\n", own={"_probed"}) == []
    assert check("from taskloom.models import resolve_model\n") == []
    assert check("from taskloom.testing.fake_server import FakeServer\n") == []
    assert (
        check("import taskloom.cli.sessions as cli\nmonkeypatch.setattr(cli, 'dispatch', f)\n")
        == []
    )
    assert check('"""Runs under `taskloom.background._keeper`."""\n') == []
    assert check("import os\nos._exit(0)\n") == []
    assert check("x.__class__, getattr(x, '__name__')\n") == []
