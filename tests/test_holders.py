"""Lease holder names tell a dead holder on this machine from a live one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from taskloom.backends import holder_is_gone, holder_name

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="holder liveness uses /proc (Linux)"
)


def test_this_process_is_alive() -> None:
    assert not holder_is_gone(holder_name("run"))


def test_a_finished_process_is_gone() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from taskloom.backends import holder_name; print(holder_name())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert holder_is_gone(out.stdout.strip())


def test_a_reused_pid_is_not_the_same_process() -> None:
    name = holder_name()
    parts = name.split(":")
    parts[4] = "1"  # the start time of another process that had this pid
    assert holder_is_gone(":".join(parts))


@pytest.mark.parametrize(
    "holder",
    ["worker-1", "host-123-abcd", "proc:other-boot:1:1:1:x", "proc:x", ""],
)
def test_foreign_or_old_names_are_never_called_gone(holder: str) -> None:
    assert not holder_is_gone(holder)
