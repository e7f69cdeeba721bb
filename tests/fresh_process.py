"""Python code run in a fresh interpreter that sees only the sources under test.

For tests about what a process loads or does from its first line (import
costs, which optional modules a use brings in): nothing of this test run's
own imports, installed plugins or environment reaches the child.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SOURCES = Path(__file__).resolve().parents[1] / "src"


def run_fresh(
    code: str | None = None, *, script: Path | None = None, args: tuple[str, ...] = ()
) -> str:
    """What `code` (or `script` with `args`) prints, run by this interpreter in
    a new process with only `src/` on its path; fails the test on a non-zero exit."""
    command = (
        [sys.executable, "-c", code] if script is None else [sys.executable, str(script), *args]
    )
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(SOURCES), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
