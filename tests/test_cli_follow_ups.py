"""Every command the `taskloom` command prints for the user to run next works
as printed: it names the store (`--store`) or the app (`--app`) the printing
command worked on. Listings name the store they read; the exit codes are in
`--help`."""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_process import taskloom_cli
from taskloom.backends import open_backend
from taskloom.cli import main
from taskloom.testing.fake_server import FakeServer

APP = """\
from taskloom import Agent, Runtime
import cli_tools

def make():
    booker = Agent("booker", "openai:gpt-4.1-mini@{base_url}", tools=[cli_tools.book])
    return Runtime(store={url!r}, agents=[booker])
"""


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer.in_thread() as s:
        yield s


def _printed(label: str, out: str) -> list[str]:
    """The commands printed after `label:`, as argument lists (without `taskloom`)."""
    found = re.findall(rf"{label}: (taskloom .+?)(?: \(or add --deny\))?$", out, re.MULTILINE)
    assert found, out
    commands = [shlex.split(line) for line in found]
    assert all(c[0] == "taskloom" for c in commands)
    return [c[1:] for c in commands]


def test_the_commands_a_parked_run_prints_work_on_its_store(
    server: FakeServer, tmp_path: Path
) -> None:
    home, store = tmp_path / "home", f"sqlite:///{tmp_path / 'elsewhere.db'}"
    server.script(
        FakeServer.reply(tool_calls=[("book", {"what": "a cabin"})]),
        FakeServer.reply("Booked."),
    )
    flags = ("--model", f"openai:gpt-4.1-mini@{server.base_url}", "--tool", "cli_tools:book")
    parked = taskloom_cli("run", "Book a cabin.", "--store", store, *flags, home=home)
    assert parked.returncode == 1, parked.stderr

    (approve,) = _printed("decide", parked.stdout)
    assert approve[-2:] == ["--store", store]
    approved = taskloom_cli(*approve, home=home)
    assert approved.returncode == 0, approved.stderr
    assert "approved" in approved.stdout
    # Deciding needs no agent, so approve cannot know the agent's options:
    # it names the store and says which options to add.
    (then,) = _printed("then", approved.stdout)
    assert then[:4] == ["resume", approve[1], "--store", store]
    assert "--app MODULE:FACTORY" in approved.stdout and "--model" in approved.stdout

    (resume,) = _printed("then", parked.stdout)
    assert resume == ["resume", approve[1], "--store", store, *flags]
    resumed = taskloom_cli(*resume, home=home)
    assert resumed.returncode == 0, resumed.stderr
    assert "Booked." in resumed.stdout
    assert not home.exists()  # nothing went to the default store


def test_approve_takes_the_app_like_run_and_resume(server: FakeServer, tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    cwd.mkdir()
    url = f"sqlite:///{tmp_path / 'app.db'}"
    (cwd / "bookapp.py").write_text(APP.format(base_url=server.base_url, url=url))
    server.script(
        FakeServer.reply(tool_calls=[("book", {"what": "a boat"})]),
        FakeServer.reply("The boat is yours."),
    )
    app = ("--app", "bookapp:make")
    parked = taskloom_cli("run", "Book a boat.", *app, "--agent", "booker", home=home, cwd=cwd)
    assert parked.returncode == 1, parked.stderr

    (approve,) = _printed("decide", parked.stdout)
    assert approve[-2:] == list(app)
    approved = taskloom_cli(*approve, home=home, cwd=cwd)
    assert approved.returncode == 0, approved.stderr

    # With the app, approve knows everything resume needs.
    (resume,) = _printed("then", approved.stdout)
    assert resume == ["resume", approve[1], *app]
    assert _printed("then", parked.stdout) == [resume]
    resumed = taskloom_cli(*resume, home=home, cwd=cwd)
    assert resumed.returncode == 0, resumed.stderr
    assert "The boat is yours." in resumed.stdout

    listed = taskloom_cli("sessions", "show", approve[1], *app, home=home, cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    assert "booked a boat" in listed.stdout
    assert not home.exists()


async def _empty_store(url: str) -> None:
    store = open_backend(url).store
    await store.list()
    await store.close()  # type: ignore[attr-defined]


def test_an_empty_listing_names_the_store_it_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("TASKLOOM_HOME", str(home))
    for path in (home / "taskloom.db", tmp_path / "other.db"):
        asyncio.run(_empty_store(f"sqlite:///{path}"))

    assert main(["sessions", "list"]) == 0
    out = capsys.readouterr().out
    assert "no sessions" in out and str(home / "taskloom.db") in out, out

    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert main(["sessions", "list", "--store", other]) == 0
    out = capsys.readouterr().out
    assert "no sessions" in out and other in out, out


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for code, meaning in [
        ("0", "completed"),
        ("1", "awaiting approval"),
        ("2", "error"),
        ("130", "interrupted"),
        ("141", "closed"),
    ]:
        assert re.search(rf"\b{code}\b[^0-9]*{meaning}", out), (code, out)
