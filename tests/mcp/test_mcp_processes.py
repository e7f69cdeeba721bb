"""MCP servers taskloom runs itself (stdio): start failures, a server that
exits mid-call, restarts and their limit, what a server process may see, and
that closing the runtime leaves no process behind."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp_support import (
    HERE,
    Pid,
    alive,
    descendants,
    fixture_stdio,
    noted,
    processes,
    results,
    start_http_fixture,
    until,
)

from conftest import SEEN_GROUPS, Started
from taskloom import Agent, RunStatus, Runtime
from taskloom.errors import ConfigurationError
from taskloom.mcp import MCPConnections, MCPLimits, MCPServer
from taskloom.models import ScriptedModel, reply

pytestmark = pytest.mark.slow

SILENT = HERE / "silent_server.py"
HOST_CHILD = HERE / "mcp_host_child.py"
CLOSE_BOUND = 30.0
"""Seconds `runtime.close()` may take at most (its own bounds are far shorter)."""


def stored_bytes(folder: Path) -> list[bytes]:
    """The SQLite database and its journal files, as bytes."""
    return [p.read_bytes() for p in folder.glob("sessions.db*")]


def agent_calling(server: MCPServer, *calls: tuple[str, dict[str, object]]) -> Agent:
    """An agent that makes `calls`, one per round, then says done."""
    turns = [reply(tool_calls=[call]) for call in calls]
    return Agent("a", ScriptedModel([*turns, reply("done")]), tools=[server])


async def test_a_server_that_fails_to_start_names_its_command_and_stderr() -> None:
    crash = "import sys; print('boom: no config file', file=sys.stderr); sys.exit(3)"
    server = MCPServer.stdio(sys.executable, ["-c", crash], name="broken")
    async with Runtime() as runtime:
        session = await runtime.create_session(agent_calling(server))
        with pytest.raises(ConfigurationError) as caught:
            await session.run("go")
    message = str(caught.value)
    assert "MCP server 'broken'" in message and sys.executable in message
    assert "exited before answering the MCP handshake" in message
    assert "boom: no config file" in message


async def test_a_command_that_does_not_exist_is_named() -> None:
    server = MCPServer.stdio("/nonexistent/mcp-server-nothing")
    async with Runtime() as runtime:
        with pytest.raises(
            ConfigurationError, match=r"/nonexistent/mcp-server-nothing\).*could not be started"
        ):
            await MCPConnections.of(runtime).tools_for(server)


@pytest.mark.parametrize(
    "bad",
    [
        {"startup": 0},
        {"close": -1.0},
        {"restarts": 0},
        {"give_up_after": 0},
        {"restart_backoff": ()},
        {"poll_backoff": (1.0, -0.5)},
    ],
)
def test_limits_that_could_not_hold_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match=f"MCPLimits: .*{next(iter(bad))}"):
        MCPLimits(**bad)  # type: ignore[arg-type]


def test_limits_given_as_lists_are_kept_as_tuples_and_can_key_a_connection() -> None:
    limits = MCPLimits(restart_backoff=[0.0, 1.0], poll_backoff=[0.5])  # type: ignore[arg-type]
    assert (limits.restart_backoff, limits.poll_backoff) == ((0.0, 1.0), (0.5,))
    assert hash(limits) == hash(MCPLimits(restart_backoff=(0.0, 1.0), poll_backoff=(0.5,)))


async def test_a_server_that_writes_garbage_and_never_answers_is_a_clear_error() -> None:
    chatter = "import sys, time\nprint('hello, I am not JSON-RPC', flush=True)\ntime.sleep(60)"
    server = MCPServer.stdio(
        sys.executable, ["-c", chatter], name="chatty", limits=MCPLimits(startup=1.5)
    )
    async with Runtime() as runtime:
        with pytest.raises(ConfigurationError) as caught:
            await MCPConnections.of(runtime).tools_for(server)
    message = str(caught.value)
    assert "did not answer the MCP handshake within 1.5s" in message
    assert "not JSON-RPC" in message and "hello, I am not JSON-RPC" in message


async def test_a_server_that_exits_mid_call_is_restarted_by_the_next_call(started: Started) -> None:
    server = fixture_stdio()
    agent = agent_calling(server, ("whoami", {}), ("die", {"code": 3}), ("whoami", {}))
    async with Runtime() as runtime:
        session = await runtime.create_session(agent)
        result = await session.run("go")
        found = results(await session.transcript())
        started.sample()
    assert result.status is RunStatus.COMPLETED  # the run went on
    first, died, second = found
    assert died == (
        "die",
        True,
        "MCP server 'fixture' exited mid-call: fixture: exiting with code 3 on request; "
        "the next call restarts it",
    )
    assert not first[1] and not second[1]
    first_pid = json.loads(first[2])["result"]
    second_pid = json.loads(second[2])["result"]
    assert first_pid != second_pid
    gone = processes().get(first_pid)
    assert gone is None or not alive(gone)


async def test_restarts_are_limited_per_minute() -> None:
    server = fixture_stdio(limits=MCPLimits(restarts=2, restart_backoff=(0.0,)))
    die = ("die", {"code": 1})
    agent = agent_calling(server, die, die, ("whoami", {}))
    async with Runtime() as runtime:
        session = await runtime.create_session(agent)
        result = await session.run("go")
        found = results(await session.transcript())
    assert result.status is RunStatus.COMPLETED
    assert [f[1] for f in found] == [True, True, True]
    assert "exited mid-call" in found[0][2] and "exited mid-call" in found[1][2]
    assert "went away 2 times in the last minute; it is not restarted for another" in found[2][2]


async def test_a_stdio_server_sees_the_safe_environment_and_env_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")
    server = fixture_stdio(env={"GIVEN": "passed on purpose"})
    names = ["OPENAI_API_KEY", "GIVEN", "PATH"]
    agent = agent_calling(server, ("environment", {"names": names}))
    async with Runtime() as runtime:
        session = await runtime.create_session(agent)
        await session.run("go")
        seen = json.loads(results(await session.transcript())[0][2])
    assert seen["OPENAI_API_KEY"] is None
    assert seen["GIVEN"] == "passed on purpose"
    assert seen["PATH"]  # the SDK's safe defaults


async def test_closing_the_runtime_kills_the_server_and_what_it_started(started: Started) -> None:
    server = fixture_stdio()
    time_server = MCPServer.stdio(sys.executable, ["-m", "mcp_server_time"], prefix="time")
    model = ScriptedModel([reply(tool_calls=[("sleepers", {})]), "done"])
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", model, tools=[server, time_server]))
        await session.run("go")
        pids = json.loads(results(await session.transcript())[0][2])["result"]
        sleepers = [Pid(pid) for pid in pids]
        servers = [Pid(pid) for pid in started.sample()]
        tree = [Pid(pid) for pid in descendants({s.pid for s in servers})]
    try:
        assert len(servers) == 2  # one process per server, for the runtime
        assert len(sleepers) == 3 and all(s.start is not None for s in sleepers)
        assert {s.pid for s in sleepers} <= {t.pid for t in tree}
        # `async with` closed the runtime, and close returns once they are
        # gone: the servers, what runs them, and the sleeps one of them
        # started (in its group with its stderr, without it, in a session
        # of its own).
        left = [p.pid for p in [*servers, *tree] if p.running]
        assert left == []
    finally:
        for process in [*servers, *tree]:
            process.kill()


async def test_closing_while_a_silent_server_is_given_up_returns_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    # The handshake times out; the runtime closes while the transport is
    # still stopping the server (its stdin closed, the server ignoring it).
    notes = tmp_path / "notes"
    server = MCPServer.stdio(
        sys.executable, [str(SILENT), str(notes)], name="silent", limits=MCPLimits(startup=0.5)
    )
    runtime = Runtime()
    listing = asyncio.ensure_future(MCPConnections.of(runtime).tools_for(server))
    await until(lambda: noted(notes, "stdin closed"))
    silent = Pid(int(noted(notes, "pid")[0]))
    try:
        async with asyncio.timeout(CLOSE_BOUND):
            await runtime.close()
        assert not silent.running
    finally:
        silent.kill()
    with pytest.raises(ConfigurationError, match="MCP server 'silent'"):
        await listing


async def test_close_returns_at_its_bound_and_what_is_left_is_killed(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    started: Started,
) -> None:
    # Far shorter than the transport takes to give up on a server that
    # ignores its stdin closing: close stops waiting, and kills.
    notes = tmp_path / "notes"
    server = MCPServer.stdio(
        sys.executable, [str(SILENT), str(notes)], name="silent", limits=MCPLimits(close=0.2)
    )
    runtime = Runtime()
    listing = asyncio.ensure_future(MCPConnections.of(runtime).tools_for(server))
    await until(lambda: noted(notes, "pid"))
    silent = Pid(int(noted(notes, "pid")[0]))
    # What the runtime runs for the server, its owner task among it.
    serving = asyncio.all_tasks() - {asyncio.current_task(), listing}
    assert serving
    try:
        async with asyncio.timeout(CLOSE_BOUND):
            await runtime.close()
        assert "MCP server 'silent' did not stop within 0.2s" in caplog.text
        await until(lambda: not silent.running)
        async with asyncio.timeout(CLOSE_BOUND):
            await asyncio.wait(serving)  # the owner unwinds once the server is gone
        # The keeper above the server ends too, once it has reaped what was below it.
        await until(lambda: not started.sample())
    finally:
        silent.kill()
    with pytest.raises(ConfigurationError, match="MCP server 'silent'"):
        await listing


def test_a_stdio_server_dies_with_a_sigkilled_host(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    host = subprocess.Popen(
        [sys.executable, str(HOST_CHILD), str(notes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    silent: Pid | None = None
    try:
        assert host.stdout is not None
        ready, _, _ = select.select([host.stdout], [], [], 60)
        line = host.stdout.readline() if ready else ""
        assert line.startswith("READY "), (line, host.stderr and host.stderr.read())
        silent = Pid(int(line.split()[1]))
        assert silent.running
        os.kill(host.pid, signal.SIGKILL)
        host.wait(timeout=10)
        deadline = time.monotonic() + 10
        while silent.running and time.monotonic() < deadline:
            time.sleep(0.01)  # another process's end: nothing to wait on but /proc
        assert not silent.running
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        for stream in (host.stdout, host.stderr):
            if stream is not None:
                stream.close()
        if silent is not None:
            silent.kill()


async def test_runtime_close_stops_a_server_that_is_still_starting(started: Started) -> None:
    slow = "import time; time.sleep(60)"
    server = MCPServer.stdio(sys.executable, ["-c", slow], name="sleepy")
    runtime = Runtime()
    listing = asyncio.ensure_future(MCPConnections.of(runtime).tools_for(server))
    while not started.sample():
        await asyncio.sleep(0.01)  # waiting for another process to appear
    await runtime.close()
    with pytest.raises(ConfigurationError, match="closed while it was starting"):
        await listing


async def test_an_http_server_that_goes_away_is_reached_again_once_back(tmp_path: Path) -> None:
    fixture = start_http_fixture(tmp_path / "marker.txt")
    SEEN_GROUPS.add(fixture.process.pid)
    server = fixture.server()
    try:
        async with Runtime() as runtime:
            first = await runtime.create_session(agent_calling(server, ("die", {"code": 4})))
            await first.run("go")
            died = results(await first.transcript())[0]
            second = await runtime.create_session(agent_calling(server, ("look", {"name": "x"})))
            await second.run("go")
            unreachable = results(await second.transcript())[0]
            fixture.stop()
            fixture = start_http_fixture(tmp_path / "marker.txt", port=fixture.port)
            SEEN_GROUPS.add(fixture.process.pid)
            third = await runtime.create_session(agent_calling(server, ("look", {"name": "y"})))
            await third.run("go")
            back = results(await third.transcript())[0]
    finally:
        fixture.stop()
    assert died == (
        "die",
        True,
        "MCP server 'fixture' closed the connection mid-call; the next call connects again",
    )
    assert unreachable[1] and "could not be reached" in unreachable[2]
    assert back == ("look", False, '{"result":"looked at y"}')


async def test_http_headers_are_never_logged_or_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "Bearer sekret-7f3a9"
    fixture = start_http_fixture(tmp_path / "marker.txt", env={"FIXTURE_EXPECT_AUTH": secret})
    SEEN_GROUPS.add(fixture.process.pid)
    server = fixture.server(headers={"Authorization": secret})
    caplog.set_level(logging.DEBUG)
    db = tmp_path / "sessions.db"
    try:
        async with Runtime(f"sqlite:///{db}") as runtime:
            session = await runtime.create_session(agent_calling(server, ("authorization", {})))
            await session.run("go")
            answer = results(await session.transcript())[0]
            connection = MCPConnections.of(runtime).connection(server)
            shown = [repr(server), repr(connection), repr(connection.launch)]
    finally:
        fixture.stop()
    assert answer == ("authorization", False, '{"result":"authorized"}')  # they were sent
    stored = b"".join(stored_bytes(tmp_path))
    assert b"sekret-7f3a9" not in stored
    assert "sekret-7f3a9" not in caplog.text
    assert all("sekret-7f3a9" not in text for text in shown)


def odd_server(*args: str) -> MCPServer:
    return MCPServer.stdio(sys.executable, [str(HERE / "odd_server.py"), *args], name="odd")


async def test_names_providers_refuse_are_mapped_and_bad_output_is_an_error() -> None:
    agent = agent_calling(odd_server(), ("files_read", {"path": "/etc/motd"}), ("weather", {}))
    async with Runtime() as runtime:
        session = await runtime.create_session(agent)
        result = await session.run("go")
        found = results(await session.transcript())
    assert result.status is RunStatus.COMPLETED
    # `files.read` on the server, `files_read` for the model.
    assert found[0] == ("files_read", False, "read /etc/motd")
    weather = found[1]
    assert weather[1] is True
    assert "MCP server 'odd'" in weather[2] and "Invalid structured content" in weather[2]


async def test_a_tool_whose_schema_the_model_cannot_use_is_a_clear_error() -> None:
    async with Runtime() as runtime:
        with pytest.raises(ConfigurationError) as caught:
            await MCPConnections.of(runtime).tools_for(odd_server("bad-schema"))
    message = str(caught.value)
    assert "MCP server 'odd' offers a tool the model cannot use ('broken')" in message
    assert "its input schema is not valid JSON schema" in message and "'moment'" in message
