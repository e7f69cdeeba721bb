"""`taskloom run --session` after a crash: the background child its run takes
up runs to its end in that command, whose session then goes on to take the
child's report, once. Real processes: the root's process is SIGKILLed while
its background child is in its model request. SQLite and PostgreSQL."""

from __future__ import annotations

import os
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


async def test_run_session_waits_for_the_child_it_took_up_and_delivers_its_report_once(
    store_url: tuple[str, str], tmp_path: Path
) -> None:
    url, schema = store_url
    runtime = Runtime(store=open_durable(url, schema))
    try:
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
            child_id = line.split()[1]
        finally:
            killed.kill()
            killed.wait(timeout=10)
            if killed.stdout is not None:
                killed.stdout.close()
        go = tmp_path / "go"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "TASKLOOM_HOME": str(tmp_path),
            "PYTHONPATH": os.pathsep.join([str(SOURCES), str(HERE)]),
            "COLUMNS": "200",
            "SETTLE_URL": url,
            "SETTLE_SCHEMA": schema,
            "SETTLE_GO": str(go),
        }
        command = ["run", "Go on.", "--session", session.id, "--app", "settle_app:make_runtime"]
        cli = subprocess.Popen(  # noqa: ASYNC220 (the command under test)
            [sys.executable, "-m", "taskloom", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert cli.stderr is not None
            said = cli.stderr.readline()
            # The child answers only now: the command waits for it, or never sees it.
            go.touch()
            out, err = cli.communicate(timeout=60)
        finally:
            cli.kill()
            cli.wait(timeout=10)
        print(out, said, err)
        assert cli.returncode == 0, err
        assert await child_status(runtime, child_id) is ChildStatus.DONE
        lines = out.splitlines()
        report = next(n for n, line in enumerate(lines) if "finished. Its report" in line)
        assert lines.index("the worker said: forty-two") > report, out
        messages = [
            e.payload
            for e in await runtime.store.load(session.id)
            if isinstance(e.payload, MessageEntry)
        ]
        # The answer that took the child's report carries its notice id: once.
        carried = [p for p in messages if any(child_id in i for i in p.delivered_ids)]
        assert len(carried) == 1, carried
        last = [p for p in messages if p.message.role == "assistant"][-1]
        assert carried[0] is last
        assert last.message.text == "the worker said: forty-two"
        # Said on stderr while it waited.
        assert said.startswith(f"taskloom: waiting for subagent {child_id[:8]} (bg: think)")
    finally:
        await runtime.close()
