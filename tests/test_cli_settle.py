"""`taskloom run --session` after a crash: the background child its run takes
up runs to its end in that command, whose session then goes on to take the
child's report, once; Ctrl-C while it waits says what is still running and
how to follow it. Real processes: the root's process is SIGKILLed while its
background child is in its model request. SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cli_process import SOURCES
from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Runtime
from taskloom.delegation import ChildStatus, child_status
from taskloom.entries import MessageEntry
from taskloom.models import FunctionModel

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import spawned_child  # noqa: E402  (the root's agent, and the process killed)

APP = "settle_app:make_runtime"


async def crashed(runtime: Runtime, url: str, schema: str) -> tuple[str, str]:
    """A root session whose process was SIGKILLed while its background child
    was in its model request: the root's id and the child's."""
    session = await runtime.create_session(spawned_child.build(FunctionModel(str)))
    killed = subprocess.Popen(  # noqa: ASYNC220 (read to one line, then killed)
        [sys.executable, str(HERE / "spawned_child.py"), url, schema, session.id],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert killed.stdout is not None
        line = killed.stdout.readline()
        assert line.startswith("SPAWNED "), line
        return session.id, line.split()[1]
    finally:
        killed.kill()
        killed.wait(timeout=10)
        if killed.stdout is not None:
            killed.stdout.close()


GO_ON = {
    "run": lambda root: ["run", "Go on.", "--session", root],
    "resume": lambda root: ["resume", root],
}


def go_on(
    root: str, url: str, schema: str, home: Path, command: str = "run"
) -> subprocess.Popen[str]:
    """`taskloom run "Go on." --session ROOT --app settle_app:make_runtime`
    (or `taskloom resume ROOT --app ...`), started; its child answers once
    `home/go` exists."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TASKLOOM_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(SOURCES), str(HERE)]),
        "COLUMNS": "200",
        "SETTLE_URL": url,
        "SETTLE_SCHEMA": schema,
        "SETTLE_GO": str(home / "go"),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "taskloom", *GO_ON[command](root), "--app", APP],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def ended(cli: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return cli.communicate(timeout=60)
    finally:
        cli.kill()
        cli.wait(timeout=10)


async def reports(runtime: Runtime, root: str, child_id: str) -> list[MessageEntry]:
    """The root's answers that took the child's report (they carry its notice id)."""
    return [
        e.payload
        for e in await runtime.store.load(root)
        if isinstance(e.payload, MessageEntry)
        and any(child_id in i for i in e.payload.delivered_ids)
    ]


@pytest.mark.parametrize("command", ["run", "resume"])
async def test_run_session_waits_for_the_child_it_took_up_and_delivers_its_report_once(
    store_url: tuple[str, str], tmp_path: Path, command: str
) -> None:
    # `taskloom resume ROOT` alone goes on with a session whose run ended but
    # whose background child was cut off, as `run --session` does.
    url, schema = store_url
    runtime = Runtime(store=open_durable(url, schema))
    try:
        root, child_id = await crashed(runtime, url, schema)
        cli = go_on(root, url, schema, tmp_path, command)
        assert cli.stderr is not None
        said = cli.stderr.readline()
        # The child answers only now: the command waits for it, or never sees it.
        (tmp_path / "go").touch()
        out, err = ended(cli)
        print(out, said, err)
        assert cli.returncode == 0, err
        assert await child_status(runtime, child_id) is ChildStatus.DONE
        lines = out.splitlines()
        report = next(n for n, line in enumerate(lines) if "finished. Its report" in line)
        assert lines.index("the worker said: forty-two") > report, out
        carried = await reports(runtime, root, child_id)
        assert len(carried) == 1, carried
        answers = [
            e.payload.message
            for e in await runtime.store.load(root)
            if isinstance(e.payload, MessageEntry) and e.payload.message.role == "assistant"
        ]
        assert answers[-1] == carried[0].message
        assert answers[-1].text == "the worker said: forty-two"
        assert said.startswith(f"taskloom: waiting for subagent {child_id[:8]} (bg: think)")
    finally:
        await runtime.close()


async def test_ctrl_c_while_run_session_waits_says_what_runs_and_the_next_run_goes_on(
    store_url: tuple[str, str], tmp_path: Path
) -> None:
    url, schema = store_url
    runtime = Runtime(store=open_durable(url, schema))
    try:
        root, child_id = await crashed(runtime, url, schema)
        cli = go_on(root, url, schema, tmp_path)
        assert cli.stderr is not None
        said = cli.stderr.readline()
        assert said.startswith(f"taskloom: waiting for subagent {child_id[:8]}"), said
        cli.send_signal(signal.SIGINT)
        out, err = ended(cli)
        print(out, said, err)
        assert cli.returncode == 130, err
        assert f"stopped waiting for subagent {child_id[:8]} (bg: think)" in err
        assert f"taskloom sessions show {root} --tree --app {APP}" in err
        assert await child_status(runtime, child_id) is ChildStatus.INTERRUPTED
        assert not await reports(runtime, root, child_id)
        # Nothing lost: the next run takes the child up again, and waits for it.
        (tmp_path / "go").touch()
        out, err = ended(go_on(root, url, schema, tmp_path))
        assert "the worker said: forty-two" in out, err
        assert await child_status(runtime, child_id) is ChildStatus.DONE
        assert len(await reports(runtime, root, child_id)) == 1
    finally:
        await runtime.close()
