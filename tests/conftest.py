"""Shared test configuration: fixtures every test may take, and a summary of
what was replayed and what did not run (with the reasons)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pg import pg_schema, store_url  # noqa: F401 (fixtures for every test)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    _skipped_outside_cassettes(terminalreporter)
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


def _skipped_outside_cassettes(terminalreporter: pytest.TerminalReporter) -> None:
    """Skips other than cassette files (those are listed below), grouped by reason:
    a whole group (the live tests without their server, PostgreSQL away) must
    never pass unnoticed."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        if "replay" in report.nodeid:
            continue
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    if not reasons:
        return
    terminalreporter.section("skipped")
    for reason, count in sorted(reasons.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count} skipped: {reason}")
