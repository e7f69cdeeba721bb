"""The npm reference server `@modelcontextprotocol/server-everything`,
installed with npm at test time into a cache folder under the system's
temporary directory (kept between runs, so it is fetched once)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

EVERYTHING = "@modelcontextprotocol/server-everything"
EVERYTHING_VERSION = "2026.8"
"""The 2026.8 releases serve `simulate-research-query`, a task tool."""

_CACHE = Path(tempfile.gettempdir()) / "taskloom-test-npm"


def everything_entry() -> Path:
    """The server's `dist/index.js` (installed on first use); skips the test
    when npm is not there, except under CI=true, where it fails."""
    entry = _CACHE / "node_modules" / EVERYTHING / "dist" / "index.js"
    if entry.exists():
        return entry
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        why = "npm and node are needed to install the MCP reference server"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    _CACHE.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            npm,
            "install",
            "--no-audit",
            "--no-fund",
            "--prefix",
            str(_CACHE),
            f"{EVERYTHING}@{EVERYTHING_VERSION}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0 or not entry.exists():
        why = f"npm could not install {EVERYTHING}: {done.stderr.strip()[-500:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return entry
