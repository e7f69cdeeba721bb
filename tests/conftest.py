"""Shared test configuration: fixtures every test may take, the replay counts summary."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pg import pg_schema, store_url  # noqa: F401 (fixtures for every test)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    try:
        import cassettes
    except ImportError:
        return
    if not cassettes.REPLAYED and not cassettes.SKIPPED:
        return
    terminalreporter.section("recorded provider traffic replayed")
    for api in sorted(set(cassettes.REPLAYED) | set(cassettes.SKIPPED)):
        skipped = cassettes.SKIPPED.get(api, {})
        terminalreporter.write_line(
            f"{api}: {cassettes.REPLAYED.get(api, 0)} interactions replayed, {len(skipped)} cassettes skipped"
        )
        for name, reason in sorted(skipped.items()):
            terminalreporter.write_line(f"    skipped {name}: {reason}")
