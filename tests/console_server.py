"""`taskloom serve` as a real process on a free loopback port, for the console tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cli_process import SOURCES, TESTS

TOKEN = "console-test-token"
_READY = re.compile(r"taskloom console, (?P<mode>.+?): (?P<url>http://[^/\s]+)/")


@dataclass(frozen=True)
class Served:
    """A running console: its base URL (no trailing slash) and printed line."""

    url: str
    line: str
    process: subprocess.Popen[str]

    def with_token(self, path: str = "/") -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.url}{path}{sep}token={TOKEN}"


@contextmanager
def serving(
    store: str, *args: str, token: str | None = TOKEN, env: dict[str, str] | None = None
) -> Iterator[Served]:
    """Start `taskloom serve --store STORE --port 0 ARGS` and stop it after.

    Only the process started here is signalled. The READY line is the one
    the command prints once its socket listens.
    """
    env = {
        **(env or {}),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join([str(SOURCES), str(TESTS)]),
        "CONSOLE_TEST_STORE": store,
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    command = [sys.executable, "-m", "taskloom", "serve", "--store", store, "--port", "0"]
    if token is not None:
        command += ["--token", token]
    process = subprocess.Popen(
        [*command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(TESTS),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = _READY.search(line)
        if match is None:
            process.kill()
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"no READY line from taskloom serve: {line!r}\n{err}")
        yield Served(match.group("url"), line, process)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
