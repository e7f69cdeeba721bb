"""The `taskloom` command tells a user what to do next in terms of the
command line: help for every argument, examples for every command, the
environment variable a missing key needs, the commands that decide what a
parked session waits for, and how long the model has been answering."""

from __future__ import annotations

import argparse
import io
import json
import os
import pty
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from cli_process import SOURCES, TESTS
from cli_process import taskloom_cli as taskloom
from taskloom import APIKeyMissing, ConfigurationError
from taskloom.cli import CommandParser, command_parser
from taskloom.cli.render import EventPrinter, Waiting
from taskloom.events import ModelRequestStarted, TextDelta, ThinkingDelta
from taskloom.models import resolve_model
from taskloom.testing.clock import FakeClock
from taskloom.testing.fake_server import FakeServer


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer.in_thread() as s:
        yield s


def commands(
    parser: CommandParser, path: tuple[str, ...] = ("taskloom",)
) -> Iterator[tuple[tuple[str, ...], CommandParser]]:
    """Every command and subcommand's parser, with the words that name it."""
    yield path, parser
    for name, (_, sub) in parser.commands.items():
        yield from commands(sub, (*path, name))


def example_lines(parser: argparse.ArgumentParser) -> list[str]:
    _, sep, rest = (parser.epilog or "").partition("examples:\n")
    if not sep:
        return []
    lines = []
    for line in rest.splitlines():
        if not line.startswith("  "):
            break
        lines.append(line.strip())
    return lines


# ---------------------------------------------------------------- help


def test_every_argument_of_every_command_has_help() -> None:
    silent = []
    for path, parser in commands(command_parser()):
        for name, help in parser.helps().items():
            if not help or help == argparse.SUPPRESS:
                silent.append(f"{' '.join(path)} {name}")
    assert silent == []


def test_every_command_has_examples_that_parse() -> None:
    for path, parser in commands(command_parser()):
        lines = example_lines(parser)
        assert lines, f"{' '.join(path)} --help shows no examples"
        shown = parser.format_help()
        for line in lines:
            assert f"\n  {line}\n" in shown  # as written: not re-wrapped
            argv = shlex.split(line)
            assert tuple(argv[: len(path)]) == path, line
            try:
                command_parser().parse_args(argv[1:])
            except SystemExit:
                pytest.fail(f"the example {line!r} does not parse")


def test_help_is_printed_with_the_examples(tmp_path: Path) -> None:
    done = taskloom("approve", "--help", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "--deny" in done.stdout and "refuse the call" in done.stdout
    assert "examples:\n  taskloom approve ID CALL_ID\n" in done.stdout


# ---------------------------------------------------------------- keys


def test_a_missing_key_names_the_variable_to_set_not_a_python_argument(tmp_path: Path) -> None:
    # taskloom_cli passes no provider variable to the command.
    done = taskloom("run", "Hello", "--model", "anthropic:claude-sonnet-4-5", home=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    error, hint = done.stderr.strip().splitlines()
    assert "ANTHROPIC_API_KEY" in error and "ANTHROPIC_API_KEY=" in hint
    assert "api_key" not in done.stderr

    google = taskloom("run", "Hello", "--model", "google:gemini-2.5-flash", home=tmp_path)
    assert "neither GOOGLE_API_KEY nor GEMINI_API_KEY is set" in google.stderr
    assert "api_key" not in google.stderr


def test_a_key_for_another_server_is_named_by_a_flag_not_a_python_argument(
    tmp_path: Path,
) -> None:
    # The provider's own variable never goes to another host; the command
    # line names a variable of the user's own instead.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TASKLOOM_HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(SOURCES), str(TESTS)]),
        "COLUMNS": "200",
        "OPENAI_API_KEY": "sk-openai-not-for-this-server",
        "MY_SERVER_KEY": "server-key-0123456789",
    }
    with FakeServer.in_thread(api_key="server-key-0123456789") as server:
        server.script(FakeServer.reply("Hello there."))
        argv = [sys.executable, "-m", "taskloom", "run", "Hi", "--model", "openai:gpt-4.1-mini"]
        argv += ["--base-url", server.base_url]
        refused = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert refused.returncode != 0
        assert "--api-key-env NAME on the command line" in refused.stderr, refused.stderr
        sent = subprocess.run(
            [*argv, "--api-key-env", "MY_SERVER_KEY"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert sent.returncode == 0, sent.stderr
        assert "Hello there." in sent.stdout
        assert server.requests[-1].headers["authorization"] == "Bearer server-key-0123456789"


def test_a_vertex_token_is_named_by_the_same_flag(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TASKLOOM_HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(SOURCES), str(TESTS)]),
        "GOOGLE_CLOUD_PROJECT": "my-project",
    }
    argv = [sys.executable, "-m", "taskloom", "run", "Hi", "--model", "vertex:gemini-2.5-flash"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "--api-key-env NAME naming a variable that holds the token" in done.stderr


def test_the_python_api_keeps_its_advice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(
        APIKeyMissing, match="OPENAI_API_KEY environment variable or pass api_key="
    ) as info:
        resolve_model("openai:gpt-4.1-mini")
    assert isinstance(info.value, ConfigurationError)
    assert (info.value.provider, info.value.variables) == ("openai", ("OPENAI_API_KEY",))


# ---------------------------------------------------------------- show


def test_sessions_show_prints_the_command_deciding_each_pending_call(
    server: FakeServer, tmp_path: Path
) -> None:
    server.script(
        FakeServer.reply(tool_calls=[("book", {"what": "a cabin"}), ("book", {"what": "a sauna"})])
    )
    store = f"sqlite:///{tmp_path / 'other store.db'}"
    model = f"openai:gpt-4.1-mini@{server.base_url}"
    parked = taskloom(
        "run", "Book both.", "--model", model, "--tool", "cli_tools:book", "--store", store,
        home=tmp_path,
    )  # fmt: skip
    assert parked.returncode == 1, parked.stderr
    (row,) = json.loads(
        taskloom("sessions", "list", "--json", "--store", store, home=tmp_path).stdout
    )
    calls = [call["id"] for call in row["pending"]]
    assert len(calls) == 2

    shown = taskloom("sessions", "show", row["id"], "--store", store, home=tmp_path)
    assert shown.returncode == 0, shown.stderr
    decides = [line.strip() for line in shown.stdout.splitlines() if "decide:" in line]
    assert len(decides) == 2
    for call_id, line in zip(calls, decides, strict=True):
        command = shlex.split(line.removeprefix("decide: ").removesuffix(" (or add --deny)"))
        assert command == ["taskloom", "approve", row["id"], call_id, "--store", store]

    # The printed command works as printed, and a decided call offers none.
    assert taskloom(*command[1:], home=tmp_path).returncode == 0
    again = taskloom("sessions", "show", row["id"], "--store", store, home=tmp_path)
    assert [line.strip() for line in again.stdout.splitlines() if "decide:" in line] == decides[:1]


# ---------------------------------------------------------------- waiting


def test_the_waiting_line_counts_and_is_wiped() -> None:
    clock, out = FakeClock(), io.StringIO()
    waiting = Waiting(out, clock=clock)
    waiting.start()
    assert out.getvalue() == "\rwaiting for the model… 0.0s"
    clock.advance(2.14)
    waiting.draw()
    assert out.getvalue().endswith("\rwaiting for the model… 2.1s")
    width = len("waiting for the model… 2.1s")
    waiting.stop()
    assert out.getvalue().endswith("\r" + " " * width + "\r")
    written = len(out.getvalue())
    waiting.stop()
    waiting.draw()  # stopped: nothing more
    assert len(out.getvalue()) == written


def test_the_printer_wipes_the_waiting_line_before_the_answer() -> None:
    clock, status, shown = FakeClock(), io.StringIO(), io.StringIO()
    printer = EventPrinter(Console(file=shown, width=100), Waiting(status, clock=clock))
    printer(ModelRequestStarted(run_id="r", round=1, model="m"))
    assert status.getvalue().endswith("0.0s")
    printer(ThinkingDelta(text="hm"))
    assert status.getvalue().endswith("0.0s")  # still waiting: thinking shows nothing
    printer(TextDelta(text="Hello"))
    assert status.getvalue().endswith(" \r")  # wiped
    assert "Hello" in shown.getvalue()


def test_no_waiting_line_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe or a file: no terminal
    assert Waiting.on_stderr() is None


@pytest.mark.slow
def test_run_shows_the_waiting_line_on_a_terminal_only(server: FakeServer, tmp_path: Path) -> None:
    server.script(FakeServer.reply("Hello there."), FakeServer.reply("Hello again."))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TASKLOOM_HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(SOURCES), str(TESTS)]),
        "COLUMNS": "200",
    }
    argv = [sys.executable, "-m", "taskloom", "run", "Hi", "--model"]
    argv.append(f"openai:gpt-4.1-mini@{server.base_url}")
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=secondary, env=env)
    finally:
        os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # EIO: the command closed its end
            break
        if not chunk:
            break
        seen += chunk
    os.close(primary)
    assert proc.stdout is not None
    stdout = proc.stdout.read().decode()
    assert proc.wait(timeout=60) == 0
    status = seen.decode()
    assert status.startswith("\rwaiting for the model… ")
    last = [frame for frame in status.split("\r") if frame.strip()][-1]
    assert status.endswith("\r" + " " * len(last) + "\r")  # wiped at the end
    assert "Hello there." in stdout and "waiting" not in stdout

    piped = taskloom(
        "run", "Hi", "--model", f"openai:gpt-4.1-mini@{server.base_url}", home=tmp_path
    )
    assert piped.returncode == 0 and piped.stderr == ""
