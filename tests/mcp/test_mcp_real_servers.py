"""Against real MCP servers from PyPI, run as subprocesses over stdio:
`mcp-server-time`, and `mcp-server-git` on a temporary repository, including
a destructive call parked in one process, approved from a second and run in
a third (SQLite)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_support import results, run_python

from taskloom import Agent, RunStatus, Runtime, ToolEffect
from taskloom.mcp import MCPServer
from taskloom.models import ScriptedModel, reply

pytestmark = pytest.mark.slow


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit and one staged change."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    git(path, "config", "user.email", "tests@example.com")
    git(path, "config", "user.name", "tests")
    (path / "notes.txt").write_text("one\n")
    git(path, "add", "notes.txt")
    git(path, "commit", "-q", "-m", "first")
    (path / "notes.txt").write_text("one\ntwo\n")
    git(path, "add", "notes.txt")
    return path


async def test_mcp_server_time_answers_through_a_run() -> None:
    server = MCPServer.stdio(sys.executable, ["-m", "mcp_server_time"], prefix="time")
    calls = [
        ("time_get_current_time", {"timezone": "Europe/Oslo"}),
        (
            "time_convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        ),
        ("time_get_current_time", {"timezone": "Mars/Olympus"}),
    ]
    model = ScriptedModel([reply(tool_calls=calls), "noted"])
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("clock", model, tools=[server]))
        result = await session.run("what time is it?")
        tools = session.tools
        found = results(await session.transcript())
    assert result.status is RunStatus.COMPLETED
    assert {n for n in tools} == {"time_get_current_time", "time_convert_time"}
    assert tools["time_get_current_time"].effect is ToolEffect.READ_ONLY  # readOnlyHint
    assert not tools["time_get_current_time"].is_gated
    now, converted, bad = found
    assert json.loads(now[2])["timezone"] == "Europe/Oslo"
    assert json.loads(converted[2])["target"]["datetime"].endswith("21:00:00+09:00")
    assert bad[1] is True and "Invalid timezone" in bad[2]
    # The model was told the prefixed names and the server's own descriptions.
    offered = {t.name: t for t in model.requests[0].tools}
    assert "IANA" in json.dumps(offered["time_get_current_time"].input_schema)


async def test_mcp_server_git_reads_and_writes_a_repository(repo: Path) -> None:
    server = MCPServer.stdio(sys.executable, ["-m", "mcp_server_git", "--repository", str(repo)])
    model = ScriptedModel(
        [
            reply(tool_calls=[("git_diff_staged", {"repo_path": str(repo)})]),
            reply(tool_calls=[("git_commit", {"repo_path": str(repo), "message": "second"})]),
            "committed",
        ]
    )
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("g", model, tools=[server]))
        result = await session.run("commit the staged change")
        tools = session.tools
        found = results(await session.transcript())
    assert result.status is RunStatus.COMPLETED
    assert tools["git_status"].effect is ToolEffect.READ_ONLY
    assert tools["git_commit"].effect is ToolEffect.WRITE and not tools["git_commit"].is_gated
    assert tools["git_reset"].is_gated  # destructiveHint: true
    assert "+two" in found[0][2] and not found[1][1]
    assert git(repo, "log", "--format=%s") == "second\nfirst\n"


def test_a_destructive_call_parked_in_one_process_runs_in_another(
    repo: Path, tmp_path: Path
) -> None:
    env = {"GIT_APP_DB": str(tmp_path / "sessions.db"), "GIT_APP_REPO": str(repo)}
    parked = run_python("git_app.py", "park", env=env)
    assert parked.returncode == 0, parked.stderr
    _, session_id, status, pending = parked.stdout.split(maxsplit=3)
    assert status == "awaiting_approval" and pending.strip() == "['reset-1']"
    assert git(repo, "diff", "--cached", "--name-only") == "notes.txt\n"  # nothing ran yet

    store = ["--store", f"sqlite:///{env['GIT_APP_DB']}"]
    approved = run_python("-m", "taskloom", "approve", session_id, "reset-1", *store, env=env)
    assert approved.returncode == 0, approved.stderr
    assert git(repo, "diff", "--cached", "--name-only") == "notes.txt\n"

    # A third process builds the agent from the host's app; the server's tools
    # are listed anew there before the approved call runs.
    resumed = run_python("-m", "taskloom", "resume", session_id, "--app", "git_app:app", env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "the index is clean again" in resumed.stdout
    assert git(repo, "diff", "--cached", "--name-only") == ""  # git_reset ran, once
    assert git(repo, "diff", "--name-only") == "notes.txt\n"
