"""The package's page on an index (README-pypi.md, the long description):
it renders there, so every link is absolute and there is no image from the
repository; it installs with `pip install 'taskloom[...]'`, never from a
clone; its code blocks are README.md's, which tests/test_readme.py runs; and
its extras are pyproject's. scripts/check_wheel.sh (run by .ci/run) builds
the wheel and runs `twine check` on it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "README-pypi.md"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_pyproject_gives_the_page_as_the_long_description() -> None:
    assert PYPROJECT["project"]["readme"] == PAGE.name


def test_every_link_is_absolute_and_no_image_comes_from_the_repository() -> None:
    text = PAGE.read_text()
    assert "<img" not in text and "![" not in text
    links = re.findall(r"\]\(([^)]*)\)", text) + re.findall(r"^\[[^\]]+\]:\s*(\S+)", text, re.M)
    assert all(link.startswith("https://") for link in links), links


def test_it_installs_from_the_index_with_the_extras_pyproject_declares() -> None:
    text = PAGE.read_text()
    assert "pip install -e" not in text and "clone" not in text
    named = {e for group in re.findall(r"taskloom\[([\w,]+)\]", text) for e in group.split(",")}
    table = set(re.findall(r"^\| `(\w+)`", text, flags=re.MULTILINE))
    declared = set(PYPROJECT["project"]["optional-dependencies"]) - {"dev", "docs"}
    assert named <= declared, named - declared
    assert table == declared


def test_its_code_blocks_are_the_readmes_which_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 2
    readme = (ROOT / "README.md").read_text()
    for block in blocks:
        assert f"```python\n{block}```" in readme, block
