"""Which commands may create a store, and how private a new one is.

Reading and deciding commands open the store with `create=False`: a store
that is not there is an error naming it, and nothing is created on disk.
A SQLite database taskloom creates, and its -wal and -shm files, are
readable by their owner only.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskloom import Agent, Runtime
from taskloom.backends import SessionMeta, open_backend
from taskloom.cli import main
from taskloom.errors import StoreNotFound
from taskloom.models import ScriptedModel, reply
from taskloom.testing.fake_server import FakeServer


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """The usual umask of a desktop session: new files readable by everyone."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def _tree(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


READING = [
    ("sessions", "list"),
    ("sessions", "list", "--json"),
    ("sessions", "show", "s1"),
    ("sessions", "show", "s1", "--json"),
    ("sessions", "show", "s1", "--tree"),
    ("approve", "s1", "call_1"),
    ("resume", "s1", "--model", "ollama:qwen3"),
    ("run", "go on", "--session", "s1", "--model", "ollama:qwen3"),
    # Read-only without --app: it says so at once, before it listens.
    ("serve", "--port", "0"),
]


@pytest.mark.parametrize("argv", READING, ids=" ".join)
def test_commands_on_a_missing_store_create_nothing(
    argv: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nonexistent" / "dir" / "x.db"
    code = main([*argv, "--store", f"sqlite:///{missing}"])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    error = err.splitlines()[0]
    assert error.startswith("taskloom: ") and str(missing) in error, err
    assert "does not exist" in error, err
    assert "no sessions" not in out
    assert _tree(tmp_path) == []


def test_the_default_store_is_not_created_by_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("TASKLOOM_HOME", str(home))
    assert main(["sessions", "list"]) == 2
    _, err = capsys.readouterr()
    assert str(home / "taskloom.db") in err.splitlines()[0], err
    assert "taskloom run" in err.splitlines()[1], err  # what creates one
    assert not home.exists()


async def test_a_store_that_must_exist_is_opened_not_made(tmp_path: Path) -> None:
    missing = tmp_path / "a" / "b.db"
    store = open_backend(f"sqlite:///{missing}", create=False).store
    try:
        with pytest.raises(StoreNotFound, match=str(missing)):
            await store.list()
        with pytest.raises(StoreNotFound):
            await store.create(SessionMeta("s1", "a", None, 0.0, {}))
    finally:
        await store.close()  # type: ignore[attr-defined]
    assert _tree(tmp_path) == []

    made = open_backend(f"sqlite:///{tmp_path / 'made.db'}").store
    await made.create(SessionMeta("s1", "a", None, 0.0, {}))
    await made.close()  # type: ignore[attr-defined]
    existing = open_backend(f"sqlite:///{tmp_path / 'made.db'}", create=False)
    try:
        assert [m.id for m in await existing.store.list()] == ["s1"]
    finally:
        await existing.close()


def test_create_false_is_accepted_by_every_scheme() -> None:
    # Nothing on disk to spare for memory://; PostgreSQL never creates the
    # database itself (connecting to a missing one fails either way).
    assert open_backend("memory://", create=False) is not None
    assert open_backend("postgresql://127.0.0.1:1/none", create=False) is not None


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("permissive_umask")
async def test_a_new_database_and_its_wal_and_shm_are_private(tmp_path: Path) -> None:
    path = tmp_path / "private.db"
    async with Runtime(store=f"sqlite:///{path}") as runtime:
        session = await runtime.create_session(Agent("a", ScriptedModel([reply("hi")])))
        await session.run("hello")
        # The -wal and -shm files exist while the database is open (stat
        # raises if one does not).
        wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
        assert {p.name: _mode(p) for p in (path, wal, shm)} == {
            "private.db": 0o600,
            "private.db-wal": 0o600,
            "private.db-shm": 0o600,
        }


@pytest.mark.usefixtures("permissive_umask")
def test_the_cli_makes_its_default_store_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TASKLOOM_HOME", str(tmp_path / "home"))
    with FakeServer.in_thread() as server:
        server.script(FakeServer.reply("hello"))
        assert main(["run", "hi", "--model", f"openai:gpt-4.1-mini@{server.base_url}"]) == 0
    capsys.readouterr()
    made = [p for p in _tree(tmp_path) if p.is_file()]
    assert tmp_path / "home" / "taskloom.db" in made
    assert {p.name: _mode(p) for p in made} == {p.name: 0o600 for p in made}


async def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    # The owner chose who may read it: taskloom does not change it.
    path = tmp_path / "shared.db"
    path.touch()
    path.chmod(0o640)
    async with Runtime(store=f"sqlite:///{path}") as runtime:
        await runtime.store.list()
    assert _mode(path) == 0o640
