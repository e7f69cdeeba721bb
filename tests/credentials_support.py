"""What a store holds and what `taskloom sessions show` prints of it, for the
tests that check no credential gets there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cli_process import SOURCES, TESTS
from taskloom.backends import SessionStore


async def everything_stored(store: SessionStore) -> str:
    """Every session's metadata and every entry of its log, as one text."""
    parts: list[str] = []
    for meta in await store.list():
        parts.append(json.dumps(meta.to_dict(), default=str))
        parts.extend(json.dumps(e.to_dict(), default=str) for e in await store.load(meta.id))
    return "\n".join(parts)


def sessions_show(url: str, schema: str, session_id: str) -> str:
    """What `taskloom sessions show` prints of the session (as a table
    and as JSON) on the store of a `store_url` pair, run as a process."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join([str(SOURCES), str(TESTS)]),
        "COLUMNS": "200",
    }
    if schema != "-":
        env["PGOPTIONS"] = f"-c search_path={schema}"
    printed = []
    command = [sys.executable, "-m", "taskloom", "sessions", "show", session_id]
    for extra in ([], ["--json"]):
        done = subprocess.run(
            [*command, *extra, "--store", url],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        printed.append(done.stdout + done.stderr)
    return "\n".join(printed)
