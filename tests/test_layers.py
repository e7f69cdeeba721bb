"""The import layers say what they mean: no sibling groups, no ignored edge.

import-linter (run by `.ci/run`) checks the code against the contracts in
pyproject.toml; this checks the contracts themselves. A layer written
`a : b` lets two parts import each other, which is a cycle by agreement; a
layer written `a | b` keeps them independent. Every import counts (type-only
and in-function ones too), and no edge against the layers is ignored: an
upward need is a port the lower layer defines.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

DECLARED_EDGES: set[str] = set()


def contracts() -> list[dict[str, Any]]:
    config = tomllib.loads(PYPROJECT.read_text())
    found: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return found


def test_no_layer_groups_siblings_that_import_each_other() -> None:
    layered = [c for c in contracts() if c["type"] == "layers"]
    assert layered
    siblings = [layer for c in layered for layer in c["layers"] if ":" in layer]
    assert siblings == []


def test_the_only_edges_against_the_layers_are_declared_ones() -> None:
    ignored = {edge for c in contracts() for edge in c.get("ignore_imports", [])}
    assert ignored <= DECLARED_EDGES


def test_every_import_counts() -> None:
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    assert config["exclude_type_checking_imports"] is False
    assert config["root_package"] == "taskloom"


def test_every_part_of_the_package_sits_in_a_layer() -> None:
    """A module no layers contract names is checked by none: a new top-level
    module must take its place in one."""
    package = PYPROJECT.parent / "src" / "taskloom"
    parts = {
        f"taskloom.{p.stem}"
        for p in package.iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").exists())
        and p.stem not in ("__init__", "__main__")
    }
    layered = {
        name.strip()
        for c in contracts()
        if c["type"] == "layers"
        for layer in c["layers"]
        for name in layer.split("|")
    }
    assert parts - layered == set()
