"""The `taskloom` command at its edges: modules that exit while imported,
ports out of range, and a reader that closes the pipe early."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_process import SOURCES, TESTS, taskloom_cli
from taskloom import Agent, Runtime
from taskloom.cli import main as cli_main
from taskloom.models import ScriptedModel, reply


def _error_and_hint(stderr: str) -> tuple[str, str]:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 2, stderr
    error, hint = lines
    assert error.startswith("taskloom: "), stderr
    assert hint.lstrip().startswith("hint: "), stderr
    return error, hint


EXITING = "import sys\nsys.exit(3)\n"
FACTORY_EXITS = "import sys\n\ndef make():\n    sys.exit('no runtime today')\n"


@pytest.mark.parametrize(
    ("module", "source", "argv"),
    [
        ("quitter", EXITING, ("run", "hi", "--model", "ollama:q", "--tool", "quitter:x")),
        ("quitter", EXITING, ("resume", "s1", "--app", "quitter:make")),
        ("stopper", FACTORY_EXITS, ("resume", "s1", "--app", "stopper:make")),
        ("stopper", FACTORY_EXITS, ("mcp", "serve", "stopper:make")),
    ],
)
def test_a_module_that_exits_is_an_error_naming_it(
    module: str, source: str, argv: tuple[str, ...], tmp_path: Path
) -> None:
    (tmp_path / f"{module}.py").write_text(source)
    done = taskloom_cli(*argv, home=tmp_path / "home", cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    error, hint = _error_and_hint(done.stderr)
    assert module in error and "exit" in error, error
    assert "must not exit" in hint or "not exit" in hint, hint


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_serve_rejects_a_port_out_of_range(port: str, tmp_path: Path) -> None:
    done = taskloom_cli("serve", "--port", port, home=tmp_path)
    assert done.returncode == 2, done.stderr
    error, hint = _error_and_hint(done.stderr)
    assert "--port" in error and port in error and "0" in error and "65535" in error, error
    assert "bug" not in hint, hint


async def _long_session(url: str) -> str:
    # Large enough that no pipe buffer holds the whole output.
    text = "a line of a long answer " * 400
    async with Runtime(store=url) as runtime:
        session = await runtime.create_session(
            Agent("talker", ScriptedModel([reply(text) for _ in range(40)]))
        )
        for n in range(40):
            await session.run(f"say it again ({n})")
        return session.id


@pytest.fixture(scope="module")
def long_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    home = tmp_path_factory.mktemp("pipe")
    return home, asyncio.run(_long_session(f"sqlite:///{home / 'taskloom.db'}"))


@pytest.mark.parametrize(
    "argv", [("sessions", "show", "{id}", "--json"), ("sessions", "show", "{id}")], ids=" ".join
)
def test_a_reader_closing_the_pipe_ends_the_command_quietly(
    argv: tuple[str, ...], long_session: tuple[Path, str]
) -> None:
    home, session_id = long_session
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TASKLOOM_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(SOURCES), str(TESTS)]),
        "COLUMNS": "200",
    }
    command = [a.format(id=session_id) for a in argv]
    # `taskloom ... | head -c 100`: the reader takes a little and goes away.
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskloom", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        head = proc.stdout.read(100)
        proc.stdout.close()
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(head) == 100
    assert proc.returncode == 141, err
    assert err == "", err


def test_the_long_transcript_is_whole_when_read_whole(long_session: tuple[Path, str]) -> None:
    # The case above cut short output that is otherwise valid.
    home, session_id = long_session
    done = taskloom_cli("sessions", "show", session_id, "--json", home=home)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["messages"]) == 80


def test_a_broken_pipe_that_is_not_standard_output_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A command's own pipe or a socket breaking is a failure to report, not
    # a reader that went away: the quiet 141 is for standard output only.
    import taskloom.cli.sessions as sessions_cli

    def broken(args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe (to a background command)")

    monkeypatch.setattr(sessions_cli, "dispatch", broken)
    code = cli_main(["sessions", "list"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("taskloom: ") and "Broken pipe" in err
