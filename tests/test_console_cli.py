"""`taskloom serve` as a process: the address and token it prints, where the
token comes from, and the store it serves."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("starlette")
import httpx2

from cli_process import SOURCES, TESTS
from console_server import TOKEN, serving
from console_sessions import parked_session
from taskloom.cli.serve import is_loopback

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agents.db'}"


async def test_serve_prints_an_address_with_a_fresh_token(store: str) -> None:
    sid = await parked_session(store)
    with serving(store, token=None) as served:
        assert "read-only (no --app)" in served.line
        address = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", served.line)
        assert address is not None and TOKEN not in served.line
        async with httpx2.AsyncClient(follow_redirects=False) as client:
            assert (await client.get(f"{served.url}/sessions/{sid}")).status_code == 401
            assert (await client.get(address.group(1))).status_code == 303
            page = await client.get(f"{served.url}/sessions/{sid}")
            assert page.status_code == 200 and "Send Ada something nice." in page.text
            assert "started without --app" in page.text


async def test_a_given_token_is_used_and_not_printed(store: str) -> None:
    await parked_session(store)
    given = "from-the-environment"
    with serving(store, token=None, env={"TASKLOOM_CONSOLE_TOKEN": given}) as served:
        assert given not in served.line and "?token=" not in served.line.split("(")[0]
        async with httpx2.AsyncClient() as client:
            assert (await client.get(f"{served.url}/?token={TOKEN}")).status_code == 401
            assert (await client.get(f"{served.url}/?token={given}")).status_code == 303
            assert (await client.get(f"{served.url}/")).status_code == 200


def test_an_app_with_another_store_is_refused(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join([str(SOURCES), str(TESTS)]),
        "CONSOLE_TEST_STORE": f"sqlite:///{tmp_path / 'app.db'}",
    }
    other = f"sqlite:///{tmp_path / 'other.db'}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "taskloom",
            "serve",
            "--store",
            other,
            "--port",
            "0",
            "--app",
            "console_sessions:make_runtime",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=TESTS,
    )
    assert done.returncode == 2, done.stderr
    assert "brings a store other than --store" in done.stderr
    assert "hint: drop --store" in done.stderr


async def test_an_app_on_the_same_store_acts(store: str) -> None:
    with serving(store, "--app", "console_sessions:make_runtime") as served:
        assert "acting through console_sessions:make_runtime" in served.line


def test_only_loopback_addresses_count_as_local() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert is_loopback("[::1]") and is_loopback("127.8.9.10")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")
    assert not is_loopback("example.org")


def test_the_readme_shows_the_picture_the_tests_take() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "## Watch and approve in the browser" in readme
    assert "](docs/console.png)" in readme
    picture = ROOT / "docs" / "console.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (ROOT / "scripts" / "refresh-console-screenshot").exists()
