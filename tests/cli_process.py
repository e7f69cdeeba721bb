"""Running the `taskloom` command as a real process, for the CLI tests."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import taskloom
from taskloom.backends import open_backend

TESTS = Path(__file__).parent
# The sources under test, ahead of whatever copy the interpreter has installed.
SOURCES = Path(taskloom.__file__).resolve().parents[1]


def taskloom_cli(
    *args: str, home: Path, cwd: Path | None = None, python_args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`python -m taskloom ARGS` with `$TASKLOOM_HOME=home`, in `cwd`.

    `python -m` puts the working directory first on `sys.path`, as a user's
    shell would when they run the command in a folder of their own modules.
    """
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TASKLOOM_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(SOURCES), str(TESTS)]),
        "COLUMNS": "200",
    }
    command = [*python_args] if python_args else ["-m", "taskloom", *args]
    return subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
    )


def empty_store(home: Path) -> Path:
    """Create the embedded store of `$TASKLOOM_HOME=home`, with no session in
    it (reading commands never create one); returns its path."""
    path = home / "taskloom.db"

    async def create() -> None:
        store = open_backend(f"sqlite:///{path}").store
        try:
            await store.list(limit=1)
        finally:
            await store.close()  # type: ignore[attr-defined]

    asyncio.run(create())
    return path
