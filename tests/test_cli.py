"""The `taskloom` command end to end: a real process against the loopback server."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from cli_process import empty_store
from cli_process import taskloom_cli as taskloom
from taskloom import Usage
from taskloom.testing.fake_server import FakeServer


@pytest.fixture
def server() -> FakeServer:
    with FakeServer.in_thread() as s:
        yield s  # type: ignore[misc]


def test_run_streams_the_answer(server: FakeServer, tmp_path: Path) -> None:
    server.script(
        FakeServer.reply(tool_calls=[("weather", {"city": "Oslo"})]),
        FakeServer.reply("It is sunny in Oslo."),
    )
    done = taskloom(
        "run",
        "Weather in Oslo?",
        "--model",
        f"openai:gpt-4.1-mini@{server.base_url}",
        "--tool",
        "cli_tools:weather",
        "--system",
        "Be brief.",
        home=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "It is sunny in Oslo." in done.stdout
    assert 'weather(city="Oslo")' in done.stdout and "sunny in Oslo" in done.stdout
    sent = server.requests[0].body
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["stream"] is True
    assert (tmp_path / "taskloom.db").exists()  # the embedded store by default


def test_a_missing_key_is_a_clear_error(tmp_path: Path) -> None:
    done = taskloom("run", "hi", "--model", "anthropic:claude-sonnet-4-5", home=tmp_path)
    assert done.returncode == 2
    assert "ANTHROPIC_API_KEY" in done.stderr and "Traceback" not in done.stderr


def test_park_list_show_approve_resume(server: FakeServer, tmp_path: Path) -> None:
    server.script(
        FakeServer.reply(tool_calls=[("book", {"what": "a cabin"})]),
        FakeServer.reply("Your cabin is booked."),
    )
    parked = taskloom(
        "run",
        "Book a cabin.",
        "--model",
        f"openai:gpt-4.1-mini@{server.base_url}",
        "--tool",
        "cli_tools:book",
        home=tmp_path,
    )
    assert parked.returncode == 1 and "awaiting approval" in parked.stdout
    match = re.search(r"taskloom approve (\w+) (\S+)", parked.stdout)
    assert match, parked.stdout
    session_id, call_id = match.groups()

    listed = taskloom("sessions", "list", home=tmp_path)
    assert session_id in listed.stdout

    shown = taskloom("sessions", "show", session_id, home=tmp_path)
    assert (
        "Book a cabin." in shown.stdout
        and "book(" in shown.stdout
        and "awaiting approval" in shown.stdout
    )

    approved = taskloom("approve", session_id, call_id, "--note", "go ahead", home=tmp_path)
    assert approved.returncode == 0 and "approved" in approved.stdout
    again = taskloom("approve", session_id, call_id, "--deny", home=tmp_path)
    assert again.returncode == 2 and "already approved" in again.stderr

    # Resuming needs the agent from the command line; the run said how.
    then = re.search(r"then: taskloom resume (.+)", parked.stdout)
    assert then, parked.stdout
    assert shlex.split(then.group(1)) == [
        session_id,
        "--model",
        f"openai:gpt-4.1-mini@{server.base_url}",
        "--tool",
        "cli_tools:book",
    ]
    resumed = taskloom("resume", *shlex.split(then.group(1)), home=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "booked a cabin" in resumed.stdout and "Your cabin is booked." in resumed.stdout
    final = taskloom("sessions", "show", session_id, home=tmp_path)
    assert "✓ book: booked a cabin" in final.stdout
    tree = taskloom("sessions", "show", session_id, "--tree", home=tmp_path)
    assert tree.returncode == 0 and session_id[:8] in tree.stdout


def test_unknown_session(tmp_path: Path) -> None:
    empty_store(tmp_path)
    done = taskloom("sessions", "show", "nope", home=tmp_path)
    assert done.returncode == 2 and "nope" in done.stderr


def test_run_under_a_tree_budget_caps_the_answer_and_prints_what_is_left(
    server: FakeServer, tmp_path: Path
) -> None:
    server.script(FakeServer.reply("Short.", usage=Usage(30, 2)))
    done = taskloom(
        "run",
        "Say something short.",
        "--model",
        f"openai:gpt-4.1-mini@{server.base_url}",
        "--budget-tokens",
        "1000",
        home=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    # The request may write no more than what the budget has left...
    cap = server.requests[0].body.get("max_completion_tokens") or server.requests[0].body.get(
        "max_tokens"
    )
    assert isinstance(cap, int) and 256 <= cap < 1000
    # ...and the run tells what is left after its 32 tokens.
    assert re.search(r"budget left \(the tree's\)\W+968 tokens", done.stdout), done.stdout
    bad = taskloom("run", "hi", "--model", "openai:x", "--budget-usd", "-1", home=tmp_path)
    assert bad.returncode == 2 and "not an amount above 0" in bad.stderr
