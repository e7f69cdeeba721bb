"""The built-in background command tools, driven by a model through real runs.

Every command here is a real child process. Commands that would outlive a
test record their pids in files; the `pids` fixture kills whatever is still
running at teardown, and the tests assert the tools already did.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from barriers import set_within
from taskloom import Agent, RunOptions, RunStatus, Runtime, ToolContext, ToolEffect, tool
from taskloom.background import background_tools
from taskloom.messages import Message
from taskloom.models import FunctionModel, ModelRequest, reply

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="process checks read /proc (Linux)"
)

ID = re.compile(r"shell-[0-9a-f]{12}")
OPTIONS = RunOptions(max_rounds=200)


# ---------------------------------------------------------------- helpers


def model_of(*steps: Callable[[ModelRequest], Any]) -> FunctionModel:
    """A model answering its n-th request with `steps[n](request)` (sync or async)."""

    async def answer(request: ModelRequest) -> Any:
        # FunctionModel records the request before it calls us.
        out = steps[len(model.requests) - 1](request)
        return await out if inspect.isawaitable(out) else out

    model = FunctionModel(answer)
    return model


def last(request: ModelRequest) -> Message:
    return request.messages[-1]


def results(request: ModelRequest) -> list[str]:
    """The latest tool results in the request (a notice may follow them)."""
    tool_turn = next(m for m in reversed(request.messages) if m.role == "tool")
    return [r.content for r in tool_turn.results]


def started(request: ModelRequest, index: int = 0) -> str:
    """The activity id in the request's `index`-th tool result (a background_run)."""
    found = ID.search(results(request)[index])
    assert found is not None, results(request)
    return found.group()


def notice(request: ModelRequest) -> str | None:
    """The background notice this request delivers, if any."""
    m = last(request)
    if m.role == "user" and m.text.startswith("[background]"):
        return m.text
    return None


def delivered_notices(request: ModelRequest) -> list[str]:
    return [
        m.text for m in request.messages if m.role == "user" and m.text.startswith("[background]")
    ]


@tool(effect=ToolEffect.READ_ONLY)
async def tick() -> str:
    """Do a small piece of other work."""
    await asyncio.sleep(0.02)
    return "ticked"


@tool  # WRITE: runs alone, so read-only calls after it in the turn see it done
async def settle(ctx: ToolContext) -> str:
    """Wait until some background work has finished (a test aid)."""
    written = asyncio.Event()
    # Watch first, then look: a notice written in between still wakes us.
    unwatch = ctx.runtime.watch(ctx.session_id, written.set)
    try:
        if not await ctx.runtime.background.inbox.pending(ctx.session_id):
            await set_within(written)
    finally:
        unwatch()
    return "settled"


def run_then_tick_until_notice(command: str) -> FunctionModel:
    """Start `command`, keep working (tick) until its notice arrives, then finish."""

    def answer(request: ModelRequest) -> Any:
        if len(model.requests) == 1:
            return reply(tool_calls=[("background_run", {"command": command})])
        if notice(request) is not None:
            return reply("done")
        return reply(tool_calls=[("tick", {})])

    model = FunctionModel(answer)
    return model


def run_then_wait(arguments: dict[str, Any]) -> FunctionModel:
    """Start a command, wait for it with background_wait (unless its notice
    came first: fast commands may beat the next round), then finish."""

    def wait(request: ModelRequest) -> Any:
        if notice(request) is not None:
            return reply("done")
        return reply(tool_calls=[("background_wait", {"ids": [started(request)], "timeout": 20})])

    return model_of(
        lambda r: reply(tool_calls=[("background_run", arguments)]),
        wait,
        lambda r: reply("done"),
    )


def outcome(model: FunctionModel) -> str:
    """What the model learnt of the command `run_then_wait` started, after its id:
    from background_wait, or from the notice (continuation lines unindented)."""
    activity_id = started(model.requests[1])
    for request in model.requests[1:]:
        text = notice(request)
        if text is not None and text.startswith(f"[background] shell {activity_id} "):
            return text.removeprefix(f"[background] shell {activity_id} ").replace("\n  ", "\n")
        for content in results(request):
            if content.startswith(f"{activity_id} "):
                return content.removeprefix(f"{activity_id} ")
    raise AssertionError(f"no result for {activity_id} reached the model")


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


class Process:
    """A process identified by pid and start time (pids get reused)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        stat = self._stat()
        self.start = stat[19] if stat is not None else ""

    def _stat(self) -> list[str] | None:
        try:
            text = Path(f"/proc/{self.pid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return None
        return text.rsplit(")", 1)[1].split()

    def _state(self) -> tuple[str, int] | None:
        stat = self._stat()
        if stat is None or stat[19] != self.start:
            return None
        return stat[0], int(stat[1])

    @property
    def is_running(self) -> bool:
        """True until it exits (a zombie has exited)."""
        state = self._state()
        return state is not None and state[0] not in ("Z", "X")

    @property
    def is_our_zombie(self) -> bool:
        """Exited but not reaped, by us: a leak (init reaps the orphans)."""
        state = self._state()
        return state is not None and state[0] in ("Z", "X") and state[1] == os.getpid()


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return ""


def gone(procs: list[Process]) -> bool:
    return not any(p.is_running or p.is_our_zombie for p in procs)


class PidFiles:
    """Pid files commands write; whatever they name is killed at teardown."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: list[Path] = []
        self.seen: list[Process] = []

    def new(self) -> Path:
        path = self.folder / f"pids-{len(self.files)}"
        self.files.append(path)
        return path

    async def read(self, path: Path, count: int) -> list[Process]:
        """The processes named in `path`, once it names `count` of them."""
        await until(lambda: len(_pids_in(path)) >= count)
        procs = [Process(pid) for pid in _pids_in(path)]
        self.seen.extend(procs)
        return procs

    def kill_all(self) -> None:
        for path in self.files:
            self.seen.extend(Process(pid) for pid in _pids_in(path))
        for proc in self.seen:
            if proc.is_running:
                os.kill(proc.pid, signal.SIGKILL)


def _pids_in(path: Path) -> list[int]:
    try:
        return [int(p) for p in path.read_text().split()]
    except FileNotFoundError:
        return []


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[PidFiles]:
    files = PidFiles(tmp_path)
    yield files
    files.kill_all()


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async with Runtime() as rt:
        yield rt


def sleeper(pidfile: Path, before: str = "") -> str:
    """A command (no shell needed) that records its pid and sleeps for long."""
    return shlex.join(["sh", "-c", f"{before}echo $$ > {shlex.quote(str(pidfile))}; exec sleep 30"])


# ---------------------------------------------------------------- runs


async def test_a_finished_command_reaches_the_model_as_a_notice_at_a_later_round(
    runtime: Runtime,
) -> None:
    model = run_then_tick_until_notice("echo hi")
    session = await runtime.create_session(Agent("main", model, tools=[*background_tools(), tick]))
    result = await session.run("go", options=OPTIONS)

    assert result.status is RunStatus.COMPLETED
    requests = model.requests
    activity_id = started(requests[1])
    # The call itself answers at once, with the id and not the command's result.
    assert "exited" not in results(requests[1])[0]
    carrying = [i for i, r in enumerate(requests) if notice(r) is not None]
    assert len(carrying) == 1 and carrying[0] >= 1
    text = notice(requests[carrying[0]])
    assert text is not None
    assert f"shell {activity_id} finished" in text
    assert "exited with code 0" in text and "\n  hi" in text
    # Delivered once: later requests carry it in the history, never again as news.
    assert delivered_notices(requests[-1]) == [text]
    assert await runtime.background.inbox.pending(session.id) == []


async def test_a_command_that_does_not_exist_fails_in_its_notice(runtime: Runtime) -> None:
    model = run_then_tick_until_notice("no-such-command-for-taskloom --help")
    session = await runtime.create_session(Agent("main", model, tools=[*background_tools(), tick]))
    result = await session.run("go", options=OPTIONS)

    assert result.status is RunStatus.COMPLETED
    text = notice(model.requests[-1])
    assert text is not None
    assert f"shell {started(model.requests[1])} failed" in text
    assert "command not found: no-such-command-for-taskloom" in text


async def test_a_command_is_split_like_a_shell_would_but_run_without_one(runtime: Runtime) -> None:
    model = run_then_wait({"command": "printf '%s|%s' 'a b' '$HOME'"})
    session = await runtime.create_session(Agent("main", model, tools=background_tools()))
    await session.run("go", options=OPTIONS)

    assert outcome(model).endswith("output:\na b|$HOME")


async def test_with_shell_true_the_command_is_run_by_sh(runtime: Runtime, tmp_path: Path) -> None:
    model = run_then_wait({"command": "echo one | tr a-z A-Z && echo two", "cwd": str(tmp_path)})
    session = await runtime.create_session(Agent("main", model, tools=background_tools(shell=True)))
    await session.run("go", options=OPTIONS)

    waited = outcome(model)
    assert "exited with code 0" in waited and waited.endswith("output:\nONE\ntwo")


async def test_a_failing_command_reports_its_exit_code_and_output(runtime: Runtime) -> None:
    command = shlex.join(
        [sys.executable, "-c", "import sys; print('bad input', file=sys.stderr); sys.exit(3)"]
    )
    model = run_then_wait({"command": command})
    session = await runtime.create_session(Agent("main", model, tools=background_tools()))
    await session.run("go", options=OPTIONS)

    waited = outcome(model)
    assert waited.startswith("failed: ")
    assert "exited with code 3" in waited and waited.endswith("bad input")


@pytest.mark.slow
async def test_a_timeout_kills_the_whole_process_group(runtime: Runtime, pids: PidFiles) -> None:
    pidfile = pids.new()
    quoted = shlex.quote(str(pidfile))
    # sh, a sleep in the background and one in the foreground: all in one group.
    command = (
        f"echo $$ > {quoted}; sleep 30 & echo $! >> {quoted}; sleep 30 & echo $! >> {quoted}; wait"
    )
    model = run_then_wait({"command": command, "timeout": 0.5})
    session = await runtime.create_session(Agent("main", model, tools=background_tools(shell=True)))
    began = time.monotonic()
    result = await session.run("go", options=OPTIONS)

    assert result.status is RunStatus.COMPLETED
    waited = outcome(model)
    assert (
        waited.startswith("timed out: ")
        and "timed out after" in waited
        and "was killed (killed by SIGTERM)" in waited
    )
    procs = await pids.read(pidfile, 3)
    await until(lambda: gone(procs))
    assert time.monotonic() - began < 10


@pytest.mark.slow
async def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(
    runtime: Runtime, pids: PidFiles
) -> None:
    pidfile = pids.new()
    quoted = shlex.quote(str(pidfile))
    # An ignored signal stays ignored across fork and exec: the sleep ignores it too.
    script = f"trap '' TERM; echo $$ > {quoted}; sleep 30 & echo $! >> {quoted}; wait"
    model = run_then_wait({"command": shlex.join(["sh", "-c", script]), "timeout": 0.3})
    session = await runtime.create_session(
        Agent("main", model, tools=background_tools(kill_grace=0.2))
    )
    await session.run("go", options=OPTIONS)

    waited = outcome(model)
    assert "timed out after" in waited and "(killed by SIGKILL)" in waited
    procs = await pids.read(pidfile, 2)
    await until(lambda: gone(procs))


async def test_flooding_output_keeps_head_and_tail_and_spills_everything(
    runtime: Runtime, tmp_path: Path
) -> None:
    code = (
        "import sys\n"
        "print('FIRST LINE')\n"
        "for i in range(20000): print(f'line {i} é')\n"
        "sys.stdout.flush()\n"
        "sys.stderr.write('LAST LINE FROM STDERR\\n')\n"
    )
    expected = (
        "FIRST LINE\n" + "".join(f"line {i} é\n" for i in range(20000)) + "LAST LINE FROM STDERR\n"
    )
    spill = tmp_path / "spill"
    model = run_then_wait({"command": shlex.join([sys.executable, "-c", code])})
    tools = background_tools(max_output_chars=2000, spill_dir=spill)
    session = await runtime.create_session(Agent("main", model, tools=tools))
    await session.run("go", options=OPTIONS)

    waited = outcome(model)
    activity_id = started(model.requests[1])
    (spilled,) = spill.iterdir()
    assert spilled.name == f"{activity_id}.log"
    assert spilled.read_text(encoding="utf-8") == expected
    assert f"{len(expected)} characters" in waited and str(spilled) in waited
    assert "FIRST LINE\nline 0 é" in waited and waited.endswith(
        "line 19999 é\nLAST LINE FROM STDERR"
    )
    assert "line 10000 é" not in waited
    assert len(waited) < 3000


async def test_small_output_is_not_spilled(runtime: Runtime, tmp_path: Path) -> None:
    model = run_then_wait({"command": "echo small"})
    tools = background_tools(max_output_chars=2000, spill_dir=tmp_path / "spill")
    session = await runtime.create_session(Agent("main", model, tools=tools))
    await session.run("go", options=OPTIONS)

    assert outcome(model).endswith("output:\nsmall")
    assert not (tmp_path / "spill").exists()


@pytest.mark.slow
async def test_background_stop_kills_the_command_and_its_notice_says_so(
    runtime: Runtime, pids: PidFiles
) -> None:
    pidfile = pids.new()
    procs: list[Process] = []

    async def stop_once_running(request: ModelRequest) -> Any:
        procs.extend(await pids.read(pidfile, 1))
        return reply(tool_calls=[("background_stop", {"id": started(request)})])

    model = model_of(
        lambda r: reply(
            tool_calls=[("background_run", {"command": sleeper(pidfile, "echo partial; ")})]
        ),
        stop_once_running,
        lambda r: reply("stopped it"),
    )
    session = await runtime.create_session(Agent("main", model, tools=background_tools()))
    result = await session.run("go", options=OPTIONS)

    assert result.status is RunStatus.COMPLETED
    activity_id = started(model.requests[1])
    assert gone(procs)
    final = model.requests[2]
    assert results(final)[0].startswith(f"stopped {activity_id}")
    text = notice(final)
    assert text is not None
    assert (
        f"shell {activity_id} was stopped" in text
        and "killed by SIGTERM" in text
        and "partial" in text
    )
    assert await runtime.background.registry.list(session.id) == []


async def test_background_stop_answers_in_band_for_unknown_ids(runtime: Runtime) -> None:
    model = model_of(
        lambda r: reply(tool_calls=[("background_stop", {"id": "shell-000000000000"})]),
        lambda r: reply("ok"),
    )
    session = await runtime.create_session(Agent("main", model, tools=background_tools()))
    await session.run("go", options=OPTIONS)

    (result,) = last(model.requests[1]).results
    assert result.is_error and "no running or unreported background work" in result.content


@pytest.mark.slow
async def test_background_status_lists_running_and_finished_commands(
    runtime: Runtime, pids: PidFiles
) -> None:
    pidfile = pids.new()
    model = model_of(
        lambda r: reply(
            tool_calls=[
                ("background_run", {"command": sleeper(pidfile)}),
                ("background_run", {"command": "echo finished-quickly"}),
                ("settle", {}),
                ("background_status", {}),
            ]
        ),
        lambda r: reply(
            tool_calls=[
                ("background_status", {"id": started(r, 0)}),
                ("background_status", {"id": "shell-000000000000"}),
            ]
        ),
        lambda r: reply(tool_calls=[("background_stop", {"id": started(model.requests[1], 0)})]),
        lambda r: reply("done"),
    )
    session = await runtime.create_session(
        Agent("main", model, tools=[*background_tools(), settle])
    )
    await session.run("go", options=OPTIONS)

    first = model.requests[1]
    sleeping, quick = started(first, 0), started(first, 1)
    listing = results(first)[3]
    running_line, finished_line = listing.split("\n")
    assert re.fullmatch(rf"{sleeping} running for [0-9.]+s: sh -c .*sleep 30.*", running_line)
    assert re.fullmatch(
        rf"{quick} finished [0-9.]+s ago: `echo finished-quickly` exited with code 0 .*",
        finished_line,
    )
    one, unknown = results(model.requests[2])
    assert one.startswith(f"{sleeping} running for ") and quick not in one
    assert "no running or unreported background work" in unknown
    (proc,) = await pids.read(pidfile, 1)
    assert gone([proc])


async def test_background_wait_returns_the_result_and_it_is_not_delivered_again(
    runtime: Runtime, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    # Finishes only once the model has asked to wait: the notice cannot slip
    # into an earlier round boundary.
    command = shlex.join(
        ["sh", "-c", f"while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.01; done; echo waited"]
    )

    def wait(request: ModelRequest) -> Any:
        gate.touch()
        return reply(tool_calls=[("background_wait", {"ids": [started(request)], "timeout": 20})])

    model = model_of(
        lambda r: reply(tool_calls=[("background_run", {"command": command})]),
        wait,
        lambda r: reply("done"),
    )
    session = await runtime.create_session(Agent("main", model, tools=background_tools()))
    result = await session.run("go", options=OPTIONS)

    assert result.status is RunStatus.COMPLETED and result.rounds == 3
    activity_id = started(model.requests[1])
    (waited,) = results(model.requests[2])
    assert waited.startswith(f"{activity_id} finished: ")
    assert "exited with code 0" in waited and waited.endswith("waited")
    assert all(delivered_notices(r) == [] for r in model.requests)
    assert await runtime.background.inbox.pending(session.id) == []


async def test_background_wait_names_what_is_still_running_after_its_timeout(
    runtime: Runtime, pids: PidFiles
) -> None:
    pidfile = pids.new()
    model = model_of(
        lambda r: reply(tool_calls=[("background_run", {"command": sleeper(pidfile)})]),
        lambda r: reply(
            tool_calls=[
                ("background_wait", {"ids": [started(r), "shell-000000000000"], "timeout": 0.1})
            ]
        ),
        lambda r: reply(tool_calls=[("background_stop", {"id": started(model.requests[1])})]),
        lambda r: reply("done"),
    )
    session = await runtime.create_session(Agent("main", model, tools=background_tools()))
    await session.run("go", options=OPTIONS)

    (waited,) = results(model.requests[2])
    still, unknown = waited.split("\n\n")
    assert still.startswith(f"{started(model.requests[1])} is still running (")
    assert unknown.startswith("shell-000000000000: no running or unreported background work")


@pytest.mark.slow
async def test_finishing_while_a_command_runs_gets_one_reminder(
    runtime: Runtime, pids: PidFiles
) -> None:
    pidfile = pids.new()
    model = model_of(
        lambda r: reply(tool_calls=[("background_run", {"command": sleeper(pidfile)})]),
        lambda r: reply("all done"),
        lambda r: reply("finishing anyway"),
    )
    session = await runtime.create_session(Agent("main", model, tools=background_tools()))
    result = await session.run("go", options=OPTIONS)

    assert result.status is RunStatus.COMPLETED and result.text == "finishing anyway"
    assert len(model.requests) == 3
    reminder = notice(model.requests[2])
    assert reminder is not None
    assert f"{started(model.requests[1])} (" in reminder and "is still running" in reminder
    # Closing the runtime ends the command it left running.
    (proc,) = await pids.read(pidfile, 1)
    assert proc.is_running
    await runtime.close()
    assert gone([proc])


@pytest.mark.slow
async def test_deleting_the_session_kills_its_commands(runtime: Runtime, pids: PidFiles) -> None:
    pidfile = pids.new()
    model = model_of(
        lambda r: reply(tool_calls=[("background_run", {"command": sleeper(pidfile)})]),
        lambda r: reply("started"),
        lambda r: reply("ok"),
    )
    session = await runtime.create_session(Agent("main", model, tools=background_tools()))
    await session.run("go", options=OPTIONS)
    (proc,) = await pids.read(pidfile, 1)
    assert proc.is_running

    await runtime.background.listeners.delete(session.id)

    assert gone([proc])
    assert await runtime.background.registry.list(session.id) == []
    assert await runtime.background.inbox.pending(session.id) == []


async def test_the_running_cap_is_answered_in_band(runtime: Runtime, pids: PidFiles) -> None:
    pidfile = pids.new()
    model = model_of(
        lambda r: reply(
            tool_calls=[
                ("background_run", {"command": sleeper(pidfile)}),
                ("background_run", {"command": "echo second"}),
            ]
        ),
        lambda r: reply(tool_calls=[("background_stop", {"id": started(r)})]),
        lambda r: reply("done"),
    )
    session = await runtime.create_session(
        Agent("main", model, tools=background_tools(max_running=1))
    )
    await session.run("go", options=OPTIONS)

    first, second = last(model.requests[1]).results
    assert not first.is_error
    assert second.is_error and "at most 1 background commands may run at once" in second.content


async def test_invalid_commands_are_answered_in_band(runtime: Runtime) -> None:
    model = model_of(
        lambda r: reply(
            tool_calls=[
                ("background_run", {"command": "echo 'unbalanced"}),
                ("background_run", {"command": "   "}),
                ("background_run", {"command": "echo x", "timeout": 0}),
            ]
        ),
        lambda r: reply("done"),
    )
    session = await runtime.create_session(Agent("main", model, tools=background_tools()))
    await session.run("go", options=OPTIONS)

    unbalanced, empty, no_time = last(model.requests[1]).results
    assert unbalanced.is_error and "cannot split the command" in unbalanced.content
    assert empty.is_error and "empty" in empty.content
    assert no_time.is_error and "timeout" in no_time.content
    assert await runtime.background.registry.list(session.id) == []


# ---------------------------------------------------------------- the process itself


@pytest.mark.slow
async def test_closing_the_runtime_kills_a_command_still_running(pids: PidFiles) -> None:
    pidfile = pids.new()
    quoted = shlex.quote(str(pidfile))
    command = shlex.join(["sh", "-c", f"echo $$ > {quoted}; sleep 30 & echo $! >> {quoted}; wait"])
    model = model_of(
        lambda r: reply(tool_calls=[("background_run", {"command": command})]),
        lambda r: reply("started"),
        lambda r: reply("leaving it running"),
    )
    runtime = Runtime()
    session = await runtime.create_session(Agent("main", model, tools=background_tools()))
    await session.run("go", options=OPTIONS)
    procs = await pids.read(pidfile, 2)
    assert all(p.is_running for p in procs)
    await runtime.close()
    await until(lambda: gone(procs))


async def test_stop_reports_what_the_command_printed_so_far(
    runtime: Runtime, pids: PidFiles
) -> None:
    pidfile = pids.new()

    async def stop_once_sleeping(request: ModelRequest) -> Any:
        (command,) = await pids.read(pidfile, 1)
        # Once sh has exec'd the sleep, "before" is in the pipe.
        await until(lambda: _comm(command.pid) == "sleep")
        return reply(tool_calls=[("background_stop", {"id": started(request)})])

    model = model_of(
        lambda r: reply(
            tool_calls=[("background_run", {"command": sleeper(pidfile, "echo before; ")})]
        ),
        stop_once_sleeping,
        lambda r: reply("stopped it"),
    )
    session = await runtime.create_session(Agent("main", model, tools=background_tools()))
    await session.run("go", options=OPTIONS)

    shown = outcome(model)
    assert "` was stopped after " in shown and "(killed by SIGTERM)" in shown
    assert shown.endswith("; output:\nbefore")


# ---------------------------------------------------------------- output capture


async def test_output_cut_inside_characters_is_decoded_and_spilled_once_past_the_caps(
    runtime: Runtime, tmp_path: Path
) -> None:
    # Byte by byte, so its multibyte characters reach the host split.
    code = (
        "import sys, time\n"
        "for byte in 'héllo wörld'.encode():\n"
        "    sys.stdout.buffer.write(bytes([byte])); sys.stdout.flush(); time.sleep(0.002)\n"
    )
    spill = tmp_path / "spill"
    model = run_then_wait({"command": shlex.join([sys.executable, "-c", code])})
    tools = background_tools(max_output_chars=7, spill_dir=spill)
    session = await runtime.create_session(Agent("main", model, tools=tools))
    await session.run("go", options=OPTIONS)

    (spilled,) = spill.iterdir()
    assert spilled.read_text(encoding="utf-8") == "héllo wörld"
    shown = outcome(model)
    assert f"(11 characters, middle cut; the full output is in {spilled})" in shown
    assert shown.endswith(":\nhél\n[... 4 characters omitted ...]\nörld")


async def test_output_within_the_caps_is_kept_whole_and_not_spilled(
    runtime: Runtime, tmp_path: Path
) -> None:
    model = run_then_wait({"command": "printf abcdefg"})
    tools = background_tools(max_output_chars=7, spill_dir=tmp_path / "spill")
    session = await runtime.create_session(Agent("main", model, tools=tools))
    await session.run("go", options=OPTIONS)

    assert outcome(model).endswith("; output:\nabcdefg")
    assert not (tmp_path / "spill").exists()
