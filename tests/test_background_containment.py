"""What background commands may see and how surely they end.

Commands get a small environment, not the host's; every process a command
starts ends with it — also one that left its process group (`setsid`), and
also when the host itself is SIGKILLed; spilled output is private to the
user and removed with its session or after the retention period.
"""

from __future__ import annotations

import os
import select
import shlex
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskloom import Agent, ConfigurationError, Runtime
from taskloom.background import background_tools
from taskloom.models import ModelRequest, reply
from test_background_tools import (
    OPTIONS,
    PidFiles,
    Process,
    model_of,
    outcome,
    run_then_wait,
    started,
)

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="process checks read /proc (Linux)"
)

SECRET = "sk-taskloom-test-do-not-leak"
HOST_CHILD = Path(__file__).with_name("background_host_child.py")


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[PidFiles]:
    files = PidFiles(tmp_path)
    yield files
    files.kill_all()


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TASKLOOM_TEST_API_KEY", SECRET)
    return SECRET


def dead(procs: list[Process]) -> bool:
    return not any(p.is_running for p in procs)


# ---------------------------------------------------------------- environment


async def test_a_command_does_not_see_the_hosts_secrets(secret: str) -> None:
    model = run_then_wait({"command": "env"})
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("main", model, tools=background_tools()))
        await session.run("go", options=OPTIONS)

    shown = outcome(model)
    assert "exited with code 0" in shown
    assert secret not in shown and "TASKLOOM_TEST_API_KEY" not in shown
    # The basics a command needs are still there.
    assert f"PATH={os.environ['PATH']}" in shown and f"HOME={os.environ['HOME']}" in shown


async def test_the_host_passes_variables_with_env(secret: str) -> None:
    model = run_then_wait({"command": "env"})
    tools = background_tools(env={"PASSED_BY_HOST": "yes", "PATH": "/usr/bin:/bin"})
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("main", model, tools=tools))
        await session.run("go", options=OPTIONS)

    shown = outcome(model)
    assert "PASSED_BY_HOST=yes" in shown and "PATH=/usr/bin:/bin" in shown
    assert secret not in shown


async def test_inherit_env_passes_the_whole_environment(secret: str) -> None:
    # The command shows the key reached it without printing it: a credential
    # of the host's environment is redacted from what is stored.
    check = f"{sys.executable} -c \"import os; print(os.environ['TASKLOOM_TEST_API_KEY'][::-1])\""
    model = run_then_wait({"command": check})
    tools = background_tools(inherit_env=True)
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("main", model, tools=tools))
        await session.run("go", options=OPTIONS)

    assert outcome(model).endswith(f"output:\n{secret[::-1]}")


def test_env_that_cannot_be_an_environment_is_refused_at_build() -> None:
    with pytest.raises(ConfigurationError, match="A=B"):
        background_tools(env={"A=B": "x"})


# ---------------------------------------------------------------- process trees


def setsid_sleeper(pidfile: Path) -> str:
    """Shell words that start a `sleep` in a session of its own, which writes
    its pid to `pidfile` once it is there (so the pid names an escaped process)."""
    inner = f"echo $$ > {shlex.quote(str(pidfile))}; exec sleep 1000"
    return shlex.join(["setsid", "sh", "-c", inner])


def double_fork(pidfile: Path) -> str:
    """A classic daemon: fork, the child makes its own session, forks again and
    exits; the orphaned grandchild writes its pid and sleeps."""
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        open(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "        time.sleep(1000)\n"
        "    os._exit(0)\n"
        "time.sleep(1000)\n"
    )
    return shlex.join([sys.executable, "-c", code, str(pidfile)])


# Commands (for shell=True) that start a `sleep` outside their process group
# and session, and go on running.
ESCAPES = {
    "setsid": lambda pidfile: f"{setsid_sleeper(pidfile)} & exec sleep 1000",
    "double-fork": double_fork,
}


def escaping(kind: str, pidfile: Path) -> str:
    return ESCAPES[kind](pidfile)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ESCAPES)
async def test_background_stop_kills_descendants_that_left_the_group(
    pids: PidFiles, kind: str
) -> None:
    pidfile = pids.new()
    escaped: list[Process] = []

    async def stop_once_escaped(request: ModelRequest) -> Any:
        escaped.extend(await pids.read(pidfile, 1))
        assert escaped[0].is_running
        return reply(tool_calls=[("background_stop", {"id": started(request)})])

    model = model_of(
        lambda r: reply(tool_calls=[("background_run", {"command": escaping(kind, pidfile)})]),
        stop_once_escaped,
        lambda r: reply("stopped"),
    )
    async with Runtime() as runtime:
        tools = background_tools(shell=True, kill_grace=0.5)
        session = await runtime.create_session(Agent("main", model, tools=tools))
        await session.run("go", options=OPTIONS)
        # Dead once the stop has answered, not merely some time later.
        assert dead(escaped)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ESCAPES)
async def test_closing_the_runtime_kills_descendants_that_left_the_group(
    pids: PidFiles, kind: str
) -> None:
    pidfile = pids.new()
    model = model_of(
        lambda r: reply(tool_calls=[("background_run", {"command": escaping(kind, pidfile)})]),
        lambda r: reply("started"),
        lambda r: reply("leaving it running"),
    )
    runtime = Runtime()
    tools = background_tools(shell=True, kill_grace=0.5)
    session = await runtime.create_session(Agent("main", model, tools=tools))
    await session.run("go", options=OPTIONS)
    escaped = await pids.read(pidfile, 1)
    assert escaped[0].is_running

    await runtime.close()

    assert dead(escaped)


@pytest.mark.slow
async def test_a_command_that_exits_leaves_no_daemon_behind(pids: PidFiles) -> None:
    pidfile = pids.new()
    # Exits once the daemon is known to be running, in a session of its own.
    quoted = shlex.quote(str(pidfile))
    command = (
        f"{setsid_sleeper(pidfile)} & while [ ! -s {quoted} ]; do sleep 0.01; done; echo started"
    )
    model = run_then_wait({"command": command})
    async with Runtime() as runtime:
        tools = background_tools(shell=True, kill_grace=0.5)
        session = await runtime.create_session(Agent("main", model, tools=tools))
        await session.run("go", options=OPTIONS)
        escaped = await pids.read(pidfile, 1)

        shown = outcome(model)
        assert "exited with code 0" in shown and shown.endswith("output:\nstarted")
        assert dead(escaped)


def killing_its_parent(pidfile: Path) -> str:
    """A command that puts a `sleep` in a session of its own, waits until it
    is there, then SIGKILLs its own parent (the nearest process above it
    that answers for its tree)."""
    quoted = shlex.quote(str(pidfile))
    return (
        f"{setsid_sleeper(pidfile)} & while [ ! -s {quoted} ]; do sleep 0.01; done; "
        "kill -9 $PPID; exec sleep 1000"
    )


@pytest.mark.slow
async def test_a_command_that_kills_its_parent_leaves_nothing_behind(pids: PidFiles) -> None:
    pidfile = pids.new()
    model = run_then_wait({"command": killing_its_parent(pidfile)})
    async with Runtime() as runtime:
        tools = background_tools(shell=True, kill_grace=0.2)
        session = await runtime.create_session(Agent("main", model, tools=tools))
        await session.run("go", options=OPTIONS)
        escaped = await pids.read(pidfile, 1)
        assert "killed by SIGKILL" in outcome(model)
        # Dead once its end is reported, not merely when the runtime closes.
        assert dead(escaped)


@pytest.mark.slow
async def test_closing_the_runtime_after_a_command_killed_its_parent_leaves_nothing(
    pids: PidFiles,
) -> None:
    pidfile = pids.new()
    model = run_then_wait({"command": killing_its_parent(pidfile)})
    async with Runtime() as runtime:
        tools = background_tools(shell=True, kill_grace=0.5)
        session = await runtime.create_session(Agent("main", model, tools=tools))
        await session.run("go", options=OPTIONS)
        escaped = await pids.read(pidfile, 1)
    assert "killed by SIGKILL" in outcome(model)
    assert dead(escaped)


def _host(pidfile: Path, *args: str) -> subprocess.Popen[str]:
    """`background_host_child.py` started on `pidfile`."""
    return subprocess.Popen(
        [sys.executable, str(HOST_CHILD), str(pidfile), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ready(host: subprocess.Popen[str], pids: PidFiles) -> list[Process]:
    """The command and the process it let escape, once the host says it is ready."""
    line = _read_line(host, timeout=30)
    assert line.startswith("READY "), (line, host.stderr and host.stderr.read())
    procs = [Process(int(pid)) for pid in line.split()[1:]]
    pids.seen.extend(procs)
    assert len(procs) == 2 and all(p.is_running for p in procs)
    return procs


def _end(host: subprocess.Popen[str]) -> None:
    if host.poll() is None:
        host.kill()
        host.wait()
    for stream in (host.stdout, host.stderr):
        if stream is not None:
            stream.close()


def _dead_within(procs: list[Process], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not dead(procs) and time.monotonic() < deadline:
        time.sleep(0.01)
    return dead(procs)


@pytest.mark.slow
def test_the_command_ends_on_its_own_when_its_host_hangs(pids: PidFiles) -> None:
    # A host that hangs (or stops reading) never asks for the end; past its
    # timeout, grace and margin the command's own deadline still ends it and
    # everything it started.
    host = _host(pids.new(), "2")
    try:
        procs = _ready(host, pids)
        os.kill(host.pid, signal.SIGSTOP)
        time.sleep(2.5)
        assert all(p.is_running for p in procs)  # past its timeout: the hung host did nothing
        assert _dead_within(procs, 20)
    finally:
        _end(host)


@pytest.mark.slow
def test_commands_die_with_a_sigkilled_host(pids: PidFiles) -> None:
    trials, survivors = 5, 0
    for trial in range(trials):
        host = _host(pids.new())
        try:
            procs = _ready(host, pids)
            os.kill(host.pid, signal.SIGKILL)
            host.wait(timeout=10)
        finally:
            _end(host)
        if not _dead_within(procs, 10):
            survivors += 1
        print(f"trial {trial}: command and escaped pid dead: {dead(procs)}")
    print(f"host SIGKILLed {trials} times; trials with survivors: {survivors}")
    assert survivors == 0


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline() if ready else ""


# ---------------------------------------------------------------- spill files

FLOOD = shlex.join([sys.executable, "-c", "for i in range(5000): print(f'line {i}')"])


async def test_spill_files_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    model = run_then_wait({"command": FLOOD})
    async with Runtime() as runtime:
        tools = background_tools(max_output_chars=200, spill_dir=spill)
        session = await runtime.create_session(Agent("main", model, tools=tools))
        await session.run("go", options=OPTIONS)

    (spilled,) = spill.iterdir()
    assert str(spilled) in outcome(model)
    assert stat.S_IMODE(spilled.stat().st_mode) == 0o600
    assert stat.S_IMODE(spill.stat().st_mode) == 0o700


async def test_deleting_the_session_removes_its_spill_files(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    tools = background_tools(max_output_chars=200, spill_dir=spill)
    async with Runtime() as runtime:
        kept_model = run_then_wait({"command": FLOOD})
        kept = await runtime.create_session(Agent("main", kept_model, tools=tools))
        await kept.run("go", options=OPTIONS)
        deleted_model = run_then_wait({"command": FLOOD})
        deleted = await runtime.create_session(Agent("main", deleted_model, tools=tools))
        await deleted.run("go", options=OPTIONS)
        kept_file = spill / f"{started(kept_model.requests[1])}.log"
        deleted_file = spill / f"{started(deleted_model.requests[1])}.log"
        assert kept_file.exists() and deleted_file.exists()

        await runtime.background.listeners.delete(deleted.id)

        assert not deleted_file.exists()
        assert kept_file.exists()


async def test_spill_files_past_the_retention_are_removed(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    spill.mkdir()
    old = spill / "shell-0123456789ab.log"
    recent = spill / "shell-ba9876543210.log"
    foreign = spill / "notes.txt"
    for path in (old, recent, foreign):
        path.write_text("x")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    os.utime(foreign, (two_hours_ago, two_hours_ago))

    model = run_then_wait({"command": "echo hi"})
    tools = background_tools(spill_dir=spill, spill_retention=3600)
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("main", model, tools=tools))
        await session.run("go", options=OPTIONS)

    assert not old.exists()
    # Younger than the retention, or not a spill file: left alone.
    assert recent.exists() and foreign.exists()
