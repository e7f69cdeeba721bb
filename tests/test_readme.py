"""Every code block in the README runs: each python block on its own, in a fresh process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
# What a block prints that shows it did what the prose says, by section heading.
PRINTS = {
    "Run an agent": "Tromsø: clear skies",
    "Watch a run happen": "get_weather -> 4°C, rain",
    "Structured output and dependencies": "customer='acme' total=1200.0",
    "Scale out": "triaged: the printer is on fire",
}


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.DOTALL)


def python_sections() -> list[tuple[str, str]]:
    """(heading of the section it is in, code) of every python block, in order."""
    text = README.read_text()
    found = []
    for match in re.finditer(r"```python\n(.*?)```", text, flags=re.DOTALL):
        headings = re.findall(r"^## (.+)$", text[: match.start()], flags=re.MULTILINE)
        found.append((headings[-1] if headings else "", match.group(1)))
    return found


SECTIONS = python_sections()


def test_the_readme_has_the_python_blocks_checked_here() -> None:
    assert len(SECTIONS) >= 8
    headings = [h for h, _ in SECTIONS]
    assert set(PRINTS) <= set(headings)


@contextmanager
def otlp_collector() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback OTLP/HTTP endpoint keeping the trace export bodies it receives."""
    bodies: list[bytes] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/v1/traces":
                bodies.append(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("heading", "code"), SECTIONS, ids=[h for h, _ in SECTIONS])
def test_python_block_runs_on_its_own(heading: str, code: str, tmp_path: Path) -> None:
    if "postgresql://" in code:
        from pg import IN_CI, postgres_reachable

        problem = postgres_reachable()
        if problem is not None and not IN_CI:
            pytest.skip(f"the block needs PostgreSQL: {problem}")
    # Blocks call asyncio.run, so they run outside pytest's event loop; a fresh
    # process per block also proves a reader can paste any one of them alone.
    with otlp_collector() as (endpoint, exported):
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint},
        )
    assert done.returncode == 0, done.stderr
    assert PRINTS.get(heading, "") in done.stdout
    if heading == "Traces":
        # the run's spans reached the collector
        assert any(b"invoke_agent forecaster" in body for body in exported)
        assert any(b"execute_tool get_weather" in body for body in exported)


def test_shell_blocks_are_the_setup_commands_and_the_fast_path() -> None:
    shell = [b.strip() for b in blocks("sh")]
    assert len(shell) == 4
    assert shell[0].endswith("taskloom demo") and "pip install -e '.[cli]'" in shell[0]
    assert shell[1].endswith("python -m pytest")
    ci = (README.parent / ".ci" / "run").read_text()
    assert shell[1] in ci  # CI runs exactly the README's test command
    # The fast path leaves out markers the suite declares (a typo would select nothing less).
    assert shell[2] == '.venv/bin/python -m pytest -m "not slow and not live"'
    declared = (README.parent / "pyproject.toml").read_text()
    assert '"slow: ' in declared and '"live: ' in declared
    # The docs site: built as CI builds it, and served.
    docs = [line.split("#")[0].strip() for line in shell[3].splitlines()]
    assert docs == [".venv/bin/mkdocs build --strict", ".venv/bin/mkdocs serve"]
    assert "mkdocs build --strict" in ci


def test_demo_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "taskloom.cli", "demo", "--fast"],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": "/usr/bin:/bin",
            "TASKLOOM_HOME": str(tmp_path),
            "COLUMNS": "120",
            # the sources under test, when they are not the installed copy
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
        },
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "scripted" in out
    assert out.count("→ get_weather(city=") == 3
    assert "strategy" in out and "injecting a correction" in out
    assert "Packing list" in out and "status" in out and "completed" in out
    # 2: an approval pause, then a resume from a fresh runtime over SQLite
    assert "needs approval" in out and "awaiting_approval" in out and "confirmation TRM-2291" in out
    # 3: a background command whose result reaches the model at a later round
    assert "background_run(" in out and "finished" in out and "212 photos are safe" in out
    # 4: three researchers fan out in parallel lanes, one worker reports later
    for lane in ("[aurora#", "[sledding#", "[fjords#", "[prices#"):
        assert lane in out, lane
    assert "background agent 'prices'" in out and "aurora hunting" in out
    # the lead's own counts and its children's are labelled apart
    assert "model requests (this agent)" in out and "model requests (children)" in out
