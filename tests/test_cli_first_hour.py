"""The `taskloom` command explains itself: versions, argument errors, connect
errors, session listings for people and scripts, continuing and interrupting
conversations, and counts that say whose they are."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from cli_process import SOURCES, TESTS
from cli_process import taskloom_cli as taskloom
from taskloom import RunResult, RunStatus, Usage, __version__
from taskloom.cli.render import usage_table
from taskloom.models import resolve_model
from taskloom.testing.fake_server import FakeServer


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer.in_thread() as s:
        yield s


def error_and_hint(stderr: str) -> tuple[str, str]:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 2, stderr
    error, hint = lines
    assert error.startswith("taskloom: "), stderr
    assert hint.startswith("  hint: "), stderr
    return error, hint


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def model_flag(server: FakeServer) -> str:
    return f"openai:gpt-4.1-mini@{server.base_url}"


# ---------------------------------------------------------------- errors


def test_version() -> None:
    done = taskloom("--version", home=Path("/nonexistent"))
    assert done.returncode == 0 and done.stdout.strip() == f"taskloom {__version__}"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("sessions", "list", "--limit", "0"), "--limit: 0 is not a number of at least 1"),
        (("sessions", "list", "--limit", "ten"), "--limit: 'ten' is not a whole number"),
        (("run", "hi", "--model", "ollama:q", "--max-rounds", "-2"), "--max-rounds: -2 is not"),
        (("sessions", "lst"), "invalid choice: 'lst'"),
        ((), "the following arguments are required: command"),
    ],
)
def test_argument_errors_are_one_line_and_a_hint(
    argv: tuple[str, ...], says: str, tmp_path: Path
) -> None:
    done = taskloom(*argv, home=tmp_path)
    assert done.returncode == 2
    error, hint = error_and_hint(done.stderr)
    assert says in error
    assert "--help" in hint


def test_a_connect_error_names_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    done = taskloom("run", "hi", "--model", "openai:m", "--base-url", url, home=tmp_path)
    assert done.returncode == 2
    error, hint = error_and_hint(done.stderr)
    assert f"cannot reach {url}/chat/completions" in error
    assert "server is up" in hint


def test_configuration_errors_are_not_retried(tmp_path: Path) -> None:
    started = time.monotonic()
    done = taskloom(
        "run", "hi", "--model", "openai:m", "--base-url", "ftp://127.0.0.1/v1", home=tmp_path
    )
    assert done.returncode == 2
    assert "retry" not in done.stdout
    error, _ = error_and_hint(done.stderr)
    assert "unsupported protocol ftp://" in error
    assert time.monotonic() - started < 10


def test_a_postgres_connect_failure_names_host_port_and_cause_within_seconds(
    tmp_path: Path,
) -> None:
    port = closed_port()
    started = time.monotonic()
    done = taskloom(
        "sessions", "list", "--store", f"postgresql://127.0.0.1:{port}/test", home=tmp_path
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 2
    error, hint = error_and_hint(done.stderr)
    assert f"127.0.0.1:{port}" in error and "refused" in error.lower()
    assert "--store" in hint
    assert elapsed < 15, elapsed


def test_provider_names_are_case_insensitive(server: FakeServer, tmp_path: Path) -> None:
    model = resolve_model("OpenAI:gpt-4.1", api_key="k")
    assert (model.provider, model.name, model.spec) == ("openai", "gpt-4.1", "openai:gpt-4.1")
    server.script(FakeServer.reply("hello"))
    done = taskloom("run", "hi", "--model", f"OpenAI:gpt-4.1-mini@{server.base_url}", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "hello" in done.stdout


# ---------------------------------------------------------------- sessions


def test_run_session_continues_the_conversation(server: FakeServer, tmp_path: Path) -> None:
    server.script(FakeServer.reply("Nice to meet you, Ada."), FakeServer.reply("You are Ada."))
    first = taskloom("run", "I am Ada.", "--model", model_flag(server), home=tmp_path)
    assert first.returncode == 0, first.stderr
    session_id = json.loads(taskloom("sessions", "list", "--json", home=tmp_path).stdout)[0]["id"]

    again = taskloom(
        "run", "Who am I?", "--session", session_id, "--model", model_flag(server), home=tmp_path
    )
    assert again.returncode == 0, again.stderr
    sent = [m["content"] for m in server.requests[1].body["messages"]]
    assert sent == ["I am Ada.", "Nice to meet you, Ada.", "Who am I?"]
    assert "You are Ada." in again.stdout


def test_sessions_list_and_show_say_where_each_session_stands(
    server: FakeServer, tmp_path: Path
) -> None:
    server.script(
        FakeServer.reply("Done."),
        FakeServer.reply(tool_calls=[("book", {"what": "a cabin"})]),
    )
    taskloom("run", "Just say done.", "--model", model_flag(server), home=tmp_path)
    parked = taskloom(
        "run",
        "Book a cabin for the weekend of the northern lights festival, please.",
        "--model",
        model_flag(server),
        "--tool",
        "cli_tools:book",
        home=tmp_path,
    )
    assert parked.returncode == 1, parked.stderr

    listed = json.loads(taskloom("sessions", "list", "--json", home=tmp_path).stdout)
    newest, oldest = listed
    assert newest["status"] == "awaiting approval"
    assert newest["agent"] == "cli"
    assert newest["last_prompt"].startswith("Book a cabin")
    (call,) = newest["pending"]
    assert call["name"] == "book" and call["arguments"] == {"what": "a cabin"}
    assert oldest["status"] == "completed" and oldest["pending"] == []

    text = taskloom("sessions", "list", home=tmp_path).stdout
    lines = text.splitlines()
    assert lines[0].split() == ["ID", "CREATED", "STATUS", "AGENT", "PENDING", "LAST", "PROMPT"]
    row = next(line for line in lines if line.startswith(newest["id"]))  # full id, unwrapped
    assert "awaiting approval" in row and " cli " in row and " 1 " in row
    assert "Book a cabin for the weekend" in row
    assert any(line.startswith(oldest["id"]) and "completed" in line for line in lines)

    shown = json.loads(taskloom("sessions", "show", newest["id"], "--json", home=tmp_path).stdout)
    assert shown["id"] == newest["id"] and shown["status"] == "awaiting approval"
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]
    assert shown["pending"] == newest["pending"] and shown["children"] == []


def test_round_numbers_go_on_across_a_resume(server: FakeServer, tmp_path: Path) -> None:
    server.script(
        FakeServer.reply(tool_calls=[("book", {"what": "a cabin"})]),
        FakeServer.reply("Booked."),
    )
    flags = ("--model", model_flag(server), "--tool", "cli_tools:book")
    parked = taskloom("run", "Book a cabin.", *flags, home=tmp_path)
    assert "round 1: asking" in parked.stdout and "round 2" not in parked.stdout
    match = re.search(r"taskloom approve (\w+) (\S+)", parked.stdout)
    assert match, parked.stdout
    session_id, call_id = match.groups()
    taskloom("approve", session_id, call_id, home=tmp_path)
    resumed = taskloom("resume", session_id, *flags, home=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "round 2: asking" in resumed.stdout and "round 1:" not in resumed.stdout


def _spawn(*args: str, home: Path) -> subprocess.Popen[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TASKLOOM_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(SOURCES), str(TESTS)]),
        "COLUMNS": "200",
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "taskloom", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow
def test_ctrl_c_keeps_the_session_and_says_how_to_go_on(server: FakeServer, tmp_path: Path) -> None:
    server.script(FakeServer.hang())
    proc = _spawn("run", "Think hard.", "--model", model_flag(server), home=tmp_path)
    try:
        deadline = time.monotonic() + 30
        # The request reached the server: the run is in flight.
        while not server.requests and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        assert server.requests, "the run never asked the model"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err
    error, hint = error_and_hint(err)
    assert "interrupted" in error
    go_on = re.search(r"go on with: (taskloom run --session (\w+) .*)$", hint)
    assert go_on, hint
    session_id = go_on.group(2)
    (row,) = json.loads(taskloom("sessions", "list", "--json", home=tmp_path).stdout)
    assert row["id"] == session_id and row["status"] == "interrupted"

    server.script(FakeServer.reply("Thought it through."))
    command = shlex.split(go_on.group(1).replace("'PROMPT'", "'Go on.'"))
    assert command[0] == "taskloom"
    again = taskloom(*command[1:], home=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "Thought it through." in again.stdout
    sent = [m["content"] for m in server.requests[-1].body["messages"]]
    assert sent == ["Think hard.", "Go on."]


# ---------------------------------------------------------------- counts


def test_the_usage_table_labels_this_agents_counts_and_its_childrens() -> None:
    result: RunResult = RunResult(
        RunStatus.COMPLETED,
        rounds=2,
        model_requests=2,
        usage=Usage(300, 60, requests=5),
        own_usage=Usage(100, 20, requests=2),
    )
    out = io.StringIO()
    Console(file=out, width=120).print(usage_table(result))
    rows = {" ".join(re.sub("[│┃]", " ", line).split()) for line in out.getvalue().splitlines()}
    assert "model requests (this agent) 2" in rows
    assert "tokens in / out (this agent) 100 / 20" in rows
    assert "model requests (children) 3" in rows
    assert "tokens in / out (children) 200 / 40" in rows
    assert result.children_usage == Usage(200, 40, requests=3)
