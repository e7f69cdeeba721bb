"""No module of one taskloom package imports another package's private
module, and no module reaches into another module's private attributes.

A package's underscored modules (`taskloom.models._base`) are how it is
built, not what it offers: another package (`taskloom.loop`, or a module of
`taskloom` itself such as `taskloom.agent`) imports what the package's
`__init__` exports, so a package can move its insides without breaking its
neighbours. Every module under src/taskloom is parsed (imports under
`TYPE_CHECKING` and inside functions included).

The same holds one level down, for attributes: `obj._name` is a reach when
`obj` is not `self`, `cls` or `super()` and no class of the module itself
defines `_name` (assigns it, declares it in `__slots__`, or defines it as a
method or class attribute). Read statically, a name the module also defines
for itself hides a reach; that is the check's blind spot, not a licence.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def module_name(path: Path) -> tuple[str, bool]:
    """The dotted name of the module at `path`, and whether it is a package."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
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
    """Whether `target` is a private module or name inside another top-level
    package than `importer`'s: `taskloom.<pkg>.(...)._<x>`, with `<pkg>` not
    the importer's."""
    parts = target.split(".")
    if len(parts) < 3 or parts[0] != "taskloom":
        return False
    owner = ".".join(parts[:2])
    if owner == top_package(importer) and importer != "taskloom":
        return False
    return any(is_private(part) for part in parts[2:])


def violations(module: str, is_package: bool, source: str) -> list[str]:
    """Each import in `source` (the code of `module`) of another top-level
    package's private module or name, as "module:line imports target"."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
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
                found.append(f"{module}:{node.lineno} imports {target}")
                break
    return found


def test_no_module_imports_another_packages_private_module() -> None:
    problems: list[str] = []
    checked = 0
    for path in sorted((SRC / "taskloom").rglob("*.py")):
        module, is_package = module_name(path)
        checked += 1
        problems += violations(module, is_package, path.read_text(encoding="utf-8"))
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


def own_private_names(tree: ast.Module) -> set[str]:
    """The private attribute names a module defines for its own objects."""
    names: set[str] = set()
    for node in ast.walk(tree):
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


def attribute_reaches(module: str, source: str) -> list[str]:
    """Each `obj._name` in `source` that reaches a private attribute the module
    does not define itself, as "module:line reaches obj._name"."""
    tree = ast.parse(source)
    own = own_private_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not is_private(node.attr):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and ast.unparse(owner.func) == "super":
            continue
        if node.attr in own or node.attr in FOREIGN_PRIVATE_ALLOWED:
            continue
        found.append(f"{module}:{node.lineno} reaches {ast.unparse(node)}")
    return found


def test_no_module_reaches_into_another_modules_private_attributes() -> None:
    problems: list[str] = []
    for path in sorted((SRC / "taskloom").rglob("*.py")):
        module, _ = module_name(path)
        problems += attribute_reaches(module, path.read_text(encoding="utf-8"))
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
