"""Every code block of the docs site runs: each python block on its own, in a fresh process.

The rules a page follows (checked here):

- A ```` ```python ```` block is a whole program: it runs alone in a fresh
  process, in an empty temporary folder, and must exit 0. A block that needs
  a server starts one itself (`taskloom.testing.fake_server.FakeServer`); a block that
  needs PostgreSQL reads `DATABASE_URL` (this test points it at a private
  schema of the test server, and skips the block like the PostgreSQL tests
  skip when there is none).
- A python block with a title (```` ```python title="test_store.py" ````)
  is written to a file of that name; a `test_*.py` file runs under pytest.
  Any other titled file stays beside the blocks after it on the same page,
  as a reader who saved it has it (an agent module that a later block
  serves with `taskloom a2a serve module:factory`, say).
- A block that starts a server (`taskloom a2a serve`, say) listens on a
  loopback port the OS picks, and stops the server before it exits: no
  process it started outlives it.
- A ```` ```sh ```` block holds only install commands (`python3 -m venv`,
  `pip install`), and every extra it installs exists in pyproject.toml.
- A ```` ```text ```` block is a picture or an output, not code.
- A block that must not run says so on the line before its fence, with the
  reason: `<!-- not run: reason -->`. There are none today; keep them rare.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pg import IN_CI, PG_DSN, postgres_reachable

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LANGUAGES = {"python", "sh", "text"}
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)(?P<attrs>[^\n]*)\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
    flags=re.MULTILINE | re.DOTALL,
)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    title: str | None
    code: str
    not_run: str | None
    # The titled files of the page's earlier blocks (name, code), written beside this one.
    beside: tuple[tuple[str, str], ...] = ()

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _blocks() -> list[Block]:
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text()
        saved: dict[str, str] = {}
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            not_run = NOT_RUN.search(before)
            title = re.search(r'title="([^"]+)"', match.group("attrs"))
            found.append(
                Block(
                    str(path.relative_to(DOCS)),
                    line,
                    match.group("lang"),
                    title.group(1) if title else None,
                    match.group("code"),
                    not_run.group("reason") if not_run else None,
                    tuple(saved.items()),
                )
            )
            if match.group("lang") == "python" and title and not title.group(1).startswith("test_"):
                saved[title.group(1)] = match.group("code")
    return found


BLOCKS = _blocks()
PYTHON = [b for b in BLOCKS if b.lang == "python"]
SHELL = [b for b in BLOCKS if b.lang == "sh"]


def test_the_pages_have_the_blocks_checked_here() -> None:
    assert len(PYTHON) >= 30, [b.id for b in PYTHON]
    pages = {b.page for b in PYTHON}
    for page in (
        "tutorial.md",
        "concepts/rounds.md",
        "howto/structured-output.md",
        "howto/deps.md",
        "howto/testing.md",
    ):
        assert page in pages
    assert {b.lang for b in BLOCKS} <= LANGUAGES, {b.id: b.lang for b in BLOCKS}


def test_every_fence_is_one_this_test_understands() -> None:
    # An indented fence (inside a list or an admonition) or one without a
    # language would escape the checks above: there are none.
    for path in sorted(DOCS.rglob("*.md")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                assert line.startswith("```"), f"{path.name}:{number}: indented fence"
    assert all(b.lang for b in BLOCKS), [b.id for b in BLOCKS if not b.lang]


def test_blocks_that_do_not_run_are_rare_and_say_why() -> None:
    skipped = [b for b in BLOCKS if b.not_run is not None]
    assert all(b.not_run for b in skipped)
    assert len(skipped) <= 2, [b.id for b in skipped]


@pytest.fixture
def postgres_env() -> Iterator[dict[str, str]]:
    """DATABASE_URL and a private schema (PGOPTIONS search_path) for a block that needs it."""
    import psycopg

    problem = postgres_reachable()
    if problem is not None:
        message = f"PostgreSQL unreachable at {PG_DSN}: {problem}"
        if IN_CI:
            pytest.fail(message + " (CI=true: PostgreSQL tests must run)")
        pytest.skip(message)
    schema = f"docs_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield {"DATABASE_URL": PG_DSN, "PGOPTIONS": f"-c search_path={schema}"}
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_python_block_runs_on_its_own(
    block: Block, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if block.not_run is not None:
        pytest.skip(f"not run: {block.not_run}")
    env = dict(os.environ)
    # A block never reaches a real provider, whatever keys the machine has.
    for name in [n for n in env if n.endswith("_API_KEY")]:
        del env[name]
    if "DATABASE_URL" in block.code:
        env.update(request.getfixturevalue("postgres_env"))
    for saved, code in block.beside:
        (tmp_path / saved).write_text(code)
    name = block.title or "block.py"
    (tmp_path / name).write_text(block.code)
    if name.startswith("test_"):
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name]
        command += ["-o", "asyncio_default_fixture_loop_scope=function"]
    else:
        command = [sys.executable, name]
    # A fresh process per block proves a reader can paste any one of them alone;
    # blocks call asyncio.run, so they run outside pytest's event loop too.
    # Its own process group: whatever it started and left running is found there.
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
        start_new_session=True,
    ) as block_process:
        try:
            out, err = block_process.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            # Still running, or a process it left holds its output open.
            _kill_group(block_process.pid, grace=0)
            out, err = block_process.communicate()
            pytest.fail(f"{block.id} did not end within 90 s\n{out}\n{err}")
        left = _kill_group(block_process.pid)
    assert block_process.returncode == 0, f"{block.id}\n{out}\n{err}"
    assert not left, f"{block.id} left processes running (killed now)"


def _kill_group(group: int, grace: float = 2.0) -> bool:
    """SIGKILL what is left of a block's process group after `grace` seconds
    (a child it stopped may still be on its way out); whether anything was."""
    deadline = time.monotonic() + grace
    try:
        while time.monotonic() < deadline:
            os.killpg(group, 0)
            time.sleep(0.05)
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def test_shell_blocks_only_install_what_exists() -> None:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    assert SHELL, "the install commands are checked here"
    for block in SHELL:
        for command in re.split(r"&&|\n", block.code):
            words = shlex.split(command, comments=True)
            if not words:
                continue
            program = Path(words[0]).name
            if words[:3] == ["python3", "-m", "venv"]:
                continue
            assert program == "pip" and words[1] == "install", f"{block.id}: {command!r}"
            for target in words[2:]:
                named = re.fullmatch(r"(?:taskloom|\.)\[([\w,-]+)\]", target)
                if named:
                    unknown = set(named.group(1).split(",")) - extras
                    assert not unknown, f"{block.id}: no extra(s) {unknown} in pyproject"


def test_every_public_package_has_a_reference_page() -> None:
    documented = {
        match.group(1)
        for page in (DOCS / "reference").glob("*.md")
        for match in re.finditer(r"^::: (taskloom\.\w+)$", page.read_text(), flags=re.MULTILINE)
    }
    packages = {
        f"taskloom.{p.parent.name}"
        for p in (ROOT / "src" / "taskloom").glob("*/__init__.py")
        if p.parent.name != "cli"  # a command, documented by its --help
    }
    assert packages - documented == set()
