"""The MCP tests: every process a test starts (MCP servers run by taskloom
in their own process groups, fixture servers the test runs itself) is gone
when the test ends, and again when the suite ends."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from mcp_support import (  # noqa: E402
    HttpFixture,
    descendants,
    live_in_groups,
    my_children,
    processes,
    start_http_fixture,
)

SEEN_GROUPS: set[int] = set()
"""Process groups of every child the MCP tests started."""


class Started:
    """The child processes a test started, sampled while they run."""

    def __init__(self) -> None:
        self.before = my_children()
        self.groups: set[int] = set()

    def sample(self) -> set[int]:
        """The children started since the test began that are alive now
        (their process groups, and those of what runs below them, are
        remembered for the checks)."""
        new = my_children() - self.before
        table = processes()
        below = new | descendants(new)
        groups = {table[p].pgrp for p in below if p in table} - {os.getpgid(0)}
        self.groups |= groups
        SEEN_GROUPS.update(groups)
        return new


@pytest.fixture(autouse=True)
def started() -> Iterator[Started]:
    record = Started()
    yield record
    leftover = record.sample()
    assert not leftover, f"child processes still running after the test: {sorted(leftover)}"
    stray = live_in_groups(record.groups)
    assert not stray, f"processes left in the groups of servers the test started: {stray}"


@pytest.fixture(scope="session", autouse=True)
def nothing_left_at_the_end() -> Iterator[None]:
    yield
    stray = live_in_groups(SEEN_GROUPS - {os.getpgid(0)})
    print(f"\nMCP tests: {len(SEEN_GROUPS)} server process groups started, {len(stray)} left")
    assert not stray, f"processes left by the MCP tests: {stray}"


@pytest.fixture
def http_fixture(tmp_path: Path) -> Iterator[HttpFixture]:
    """The fixture server over HTTP, for one test."""
    server = start_http_fixture(tmp_path / "marker.txt")
    SEEN_GROUPS.add(server.process.pid)  # its own session: the group is its pid
    try:
        yield server
    finally:
        server.stop()
