"""Recovering from the command line: a real process running a session is
SIGKILLed mid-run; `taskloom sessions list` and `show` then say the run was
interrupted (not running) and `taskloom resume ID` alone goes on with it to
its end, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_process import SOURCES, TESTS
from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, Runtime
from taskloom.entries import MessageEntry
from taskloom.models import FunctionModel, reply
from test_crash import Child

pytestmark = pytest.mark.slow


def cli(*args: str, url: str, schema: str, effects: Path) -> subprocess.CompletedProcess[str]:
    """`python -m taskloom ARGS` with the recovery app's store in its environment."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TASKLOOM_HOME": str(effects.parent / "home"),
        "PYTHONPATH": os.pathsep.join([str(SOURCES), str(TESTS)]),
        "COLUMNS": "200",
        "RECOVER_URL": url,
        "RECOVER_SCHEMA": schema,
        "RECOVER_EFFECTS": str(effects),
    }
    command = [sys.executable, "-m", "taskloom", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


async def killed_mid_run(
    url: str, schema: str, scenario: str, point: str, effects: Path, agent: str = "crashy"
) -> str:
    """A session whose run crash_child.py started, killed at `point`."""
    runtime = Runtime(store=open_durable(url, schema))
    model = FunctionModel(lambda request: reply("unused"), name="crash")
    session = await runtime.create_session(Agent(agent, model))
    await runtime.close()
    await asyncio.to_thread(effects.touch)
    child = Child(scenario, url, schema, session.id, effects)
    try:
        child.wait_for(point)
    finally:
        child.kill()
    return session.id


async def answers(url: str, schema: str, session_id: str) -> list[str]:
    """The texts of the session's final answers, from its log."""
    runtime = Runtime(store=open_durable(url, schema))
    try:
        entries = await runtime.store.load(session_id)
    finally:
        await runtime.close()
    said = [e.payload.message for e in entries if isinstance(e.payload, MessageEntry)]
    return [m.text for m in said if m.role == "assistant" and not m.tool_calls]


APP = ("--app", "recover_app:make_runtime")


async def test_a_run_whose_process_was_killed_is_listed_as_interrupted(
    store_url: tuple[str, str], tmp_path: Path
) -> None:
    url, schema = store_url
    effects = tmp_path / "effects.txt"
    sid = await killed_mid_run(url, schema, "during-model", "during-model", effects)
    # At once: the dead holder's lease has not lapsed yet (it lasts 30 s).
    listed = cli("sessions", "list", "--json", *APP, url=url, schema=schema, effects=effects)
    assert listed.returncode == 0, listed.stderr
    (row,) = [r for r in json.loads(listed.stdout) if r["id"] == sid]
    assert row["status"] == "interrupted" and row["interrupted_at"], row
    table = cli("sessions", "list", *APP, url=url, schema=schema, effects=effects)
    (line,) = [x for x in table.stdout.splitlines() if x.startswith(sid)]
    assert " interrupted since 20" in line, table.stdout
    shown = cli("sessions", "show", sid, *APP, url=url, schema=schema, effects=effects)
    assert "its run was cut off" in shown.stdout, shown.stdout
    go_on = f"go on: taskloom resume {sid} --app recover_app:make_runtime\n"
    assert go_on in shown.stdout, shown.stdout


async def test_a_background_child_whose_process_was_killed_is_shown_interrupted(
    store_url: tuple[str, str], tmp_path: Path
) -> None:
    url, schema = store_url
    effects = tmp_path / "effects.txt"
    root = await killed_mid_run(url, schema, "tree-bg-20000-500", "during-model", effects, "lead")
    tree = cli("sessions", "show", root, "--tree", *APP, url=url, schema=schema, effects=effects)
    assert tree.returncode == 0, tree.stderr
    (child,) = [x for x in tree.stdout.splitlines() if " bg " in x]
    assert "[interrupted]" in child, tree.stdout
    listed = cli("sessions", "list", "--json", *APP, url=url, schema=schema, effects=effects)
    statuses = {r["parent_id"] is None: r["status"] for r in json.loads(listed.stdout)}
    assert statuses == {True: "interrupted", False: "interrupted"}, listed.stdout


@pytest.mark.parametrize(
    ("scenario", "final"),
    [("during-model", "recovered"), ("before-end", "done")],
)
async def test_resume_goes_on_with_a_run_cut_off_by_a_crash(
    store_url: tuple[str, str], tmp_path: Path, scenario: str, final: str
) -> None:
    url, schema = store_url
    effects = tmp_path / "effects.txt"
    sid = await killed_mid_run(url, schema, scenario, scenario, effects)

    resumed = cli("resume", sid, *APP, url=url, schema=schema, effects=effects)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # The charge the killed process made is not made again; one final answer
    # (cut off after it was stored, it is not asked for again).
    assert effects.read_text().split() == ["call_charge"]
    assert await answers(url, schema, sid) == [final]

    listed = cli("sessions", "list", "--json", *APP, url=url, schema=schema, effects=effects)
    (row,) = [r for r in json.loads(listed.stdout) if r["id"] == sid]
    assert row["status"] == "completed" and row["interrupted_at"] is None, row

    again = cli("resume", sid, *APP, url=url, schema=schema, effects=effects)
    assert again.returncode == 2 and "nothing to go on with" in again.stderr, again.stderr
    assert f"taskloom run --session {sid} --app recover_app:make_runtime" in again.stderr
