"""A real process SIGKILLed inside a memory edit (after the store applied it,
before the tool's result was in the log), then resumed from the store: the
edit is applied exactly once, and the call run again is answered as applied."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pg import pg_schema, store_url  # noqa: F401 (fixtures)
from taskloom import Agent, Runtime
from taskloom.backends import open_backend
from taskloom.entries import MemoryEdited
from taskloom.memory import Block, Memory, MemoryTool
from taskloom.models import ScriptedModel

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("memory_crash_child.py")
USER = ("user", "u1")
PASSAGE = "Prefers meetings after ten."
TRIALS = 3


def run_child_until_the_write(url: str, schema: str, session_id: str, op: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), url, schema, session_id, op],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"child exited early: {proc.stderr.read()}")  # type: ignore[union-attr]
            if line.strip() == "READY after-memory-write":
                return
        raise AssertionError("the child never wrote the memory edit")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@pytest.mark.parametrize("op", ["append", "replace"])
async def test_a_memory_edit_killed_after_its_write_applies_once_on_resume(
    store_url: tuple[str, str],  # noqa: F811
    op: str,
) -> None:
    url, schema = store_url
    backend = open_backend(url, **({} if schema == "-" else {"schema": schema}))
    memory = backend.memory
    assert memory is not None
    runtime = Runtime(backend)
    agent_memory = Memory([Block("human", "What you know of the user")], USER)
    counts: list[int] = []
    try:
        for _ in range(TRIALS):
            if op == "replace":
                await memory.put(USER, "block:human", "Meets at nine.")
            base = await memory.get(USER, "block:human")
            base_version = 0 if base is None else base.version
            model = ScriptedModel(["resumed"])
            session = await runtime.create_session(Agent("assistant", model, memory=agent_memory))
            run_child_until_the_write(url, schema, session.id, op)
            killed = await memory.get(USER, "block:human")
            assert killed is not None and killed.version == base_version + 1  # applied, then killed
            resumed = await runtime.open_session(
                session.id, Agent("assistant", model, memory=agent_memory)
            )
            result = await resumed.run("are you there?")
            assert result.status.value == "completed"
            # The cut-off call ran again with its key: answered as applied, not applied twice.
            [answer] = model.requests[0].messages[2].results
            assert not answer.is_error and "updated" in answer.content, answer.content
            item = await memory.get(USER, "block:human")
            assert item is not None and item.version == base_version + 1
            text = str(item.value)
            counts.append(text.count(PASSAGE) if op == "append" else text.count("ten"))
            if op == "replace":
                assert text == "Meets at ten."
            edits = [
                MemoryEdited.from_data(e.data)
                for e in await resumed.entries()
                if e.kind == "memory_edited"
            ]
            assert [(e.version_after, e.replayed) for e in edits] == [(base_version + 1, True)]
        print(f"{url.split(':')[0]} {op}: count after each of {TRIALS} trials: {counts}")
        assert counts == (list(range(1, TRIALS + 1)) if op == "append" else [1] * TRIALS)
    finally:
        await runtime.close()


@pytest.mark.parametrize("op", ["tool-insert", "tool-str_replace"])
async def test_a_memory_tool_edit_killed_after_its_write_applies_once_on_resume(
    store_url: tuple[str, str],  # noqa: F811
    op: str,
) -> None:
    url, schema = store_url
    backend = open_backend(url, **({} if schema == "-" else {"schema": schema}))
    memory = backend.memory
    assert memory is not None
    runtime = Runtime(backend)
    counts: list[int] = []
    try:
        if op == "tool-insert":
            await memory.put(USER, "notes.md", "About the user:\n")
        for _ in range(TRIALS):
            if op == "tool-str_replace":
                await memory.put(USER, "notes.md", "Meets at nine.\n")
            base = await memory.get(USER, "notes.md")
            assert base is not None
            model = ScriptedModel(["resumed"])
            agent = Agent("assistant", model, tools=[MemoryTool(USER, memory)])
            session = await runtime.create_session(agent)
            run_child_until_the_write(url, schema, session.id, op)
            killed = await memory.get(USER, "notes.md")
            assert killed is not None and killed.version == base.version + 1  # applied, then killed
            resumed = await runtime.open_session(session.id, agent)
            result = await resumed.run("are you there?")
            assert result.status.value == "completed"
            # The cut-off call ran again with its key: answered, not applied twice.
            [answer] = model.requests[0].messages[2].results
            assert not answer.is_error, answer.content
            item = await memory.get(USER, "notes.md")
            assert item is not None and item.version == base.version + 1
            text = str(item.value)
            counts.append(text.count(PASSAGE) if op == "tool-insert" else text.count("ten"))
            if op == "tool-str_replace":
                assert text == "Meets at ten.\n"
                assert "already applied" in answer.content
            edits = [
                MemoryEdited.from_data(e.data)
                for e in await resumed.entries()
                if e.kind == "memory_edited"
            ]
            # Only the retry's write is in the log (the first try was killed
            # before its result), marked as the store's replay of the key.
            assert [(e.op, e.version_after, e.replayed) for e in edits] == [
                (op[5:], base.version + 1, True)
            ]
        print(f"{url.split(':')[0]} {op}: count after each of {TRIALS} trials: {counts}")
        assert counts == (list(range(1, TRIALS + 1)) if op == "tool-insert" else [1] * TRIALS)
    finally:
        await runtime.close()


async def test_a_rename_killed_between_its_copy_and_its_delete_finishes_on_resume(
    store_url: tuple[str, str],  # noqa: F811
) -> None:
    # The copy is applied, the source not yet deleted: the call run again
    # finds its own copy at the destination and goes on (its copy answered
    # by the store), rather than calling the destination taken.
    url, schema = store_url
    backend = open_backend(url, **({} if schema == "-" else {"schema": schema}))
    memory = backend.memory
    assert memory is not None
    runtime = Runtime(backend)
    try:
        await memory.put(USER, "notes.md", "Meets at nine.\n")
        model = ScriptedModel(["resumed"])
        agent = Agent("assistant", model, tools=[MemoryTool(USER, memory)])
        session = await runtime.create_session(agent)
        run_child_until_the_write(url, schema, session.id, "tool-rename")
        names = {i.key for i in await memory.list(USER)}
        assert names == {"notes.md", "moved.md"}  # copied, then killed
        resumed = await runtime.open_session(session.id, agent)
        assert (await resumed.run("are you there?")).status.value == "completed"
        [answer] = model.requests[0].messages[2].results
        assert (answer.content, answer.is_error) == (
            "Successfully renamed /memories/notes.md to /memories/moved.md",
            False,
        )
        items = {i.key: (i.value, i.version) for i in await memory.list(USER)}
        assert items == {"moved.md": ("Meets at nine.\n", 1)}
    finally:
        await runtime.close()


@pytest.mark.parametrize(
    ("op", "answer", "left"),
    [
        # Killed after the first of three deletes: the call run again deletes
        # the two files left (their writes keyed by what they delete, not by
        # their place among the call's writes, which the first try's delete
        # of a.md took).
        ("tool-rmdir", "Successfully deleted /memories/dir", {}),
        # Killed with a.md moved and b.md copied but not yet deleted: the
        # destination holds only this call's copies, so it goes on; b.md's
        # copy is answered by the store, its delete and c.md's move are made.
        (
            "tool-mvdir",
            "Successfully renamed /memories/dir to /memories/done",
            {"done/a.md": "A\n", "done/b.md": "B\n", "done/c.md": "C\n"},
        ),
    ],
)
async def test_a_directory_command_killed_part_way_finishes_on_resume(
    store_url: tuple[str, str],  # noqa: F811
    op: str,
    answer: str,
    left: dict[str, str],
) -> None:
    url, schema = store_url
    backend = open_backend(url, **({} if schema == "-" else {"schema": schema}))
    memory = backend.memory
    assert memory is not None
    runtime = Runtime(backend)
    try:
        for name in ("a", "b", "c"):
            await memory.put(USER, f"dir/{name}.md", f"{name.upper()}\n")
        model = ScriptedModel(["resumed"])
        agent = Agent("assistant", model, tools=[MemoryTool(USER, memory)])
        session = await runtime.create_session(agent)
        run_child_until_the_write(url, schema, session.id, op)
        killed = {i.key for i in await memory.list(USER)}
        assert killed == (
            {"dir/b.md", "dir/c.md"}
            if op == "tool-rmdir"
            else {"done/a.md", "dir/b.md", "done/b.md", "dir/c.md"}
        )
        resumed = await runtime.open_session(session.id, agent)
        assert (await resumed.run("are you there?")).status.value == "completed"
        [result] = model.requests[0].messages[2].results
        assert (result.content, result.is_error) == (answer, False)
        items = {i.key: i.value for i in await memory.list(USER)}
        assert items == left
        edits = [
            MemoryEdited.from_data(e.data)
            for e in await resumed.entries()
            if e.kind == "memory_edited"
        ]
        # Each write is logged once: the first try's up to the one it was
        # killed in (logged after the store applied it), then the retry's.
        assert [e.key for e in edits] == (
            ["dir/b.md", "dir/c.md"]
            if op == "tool-rmdir"
            else ["done/a.md", "dir/a.md", "done/b.md", "dir/b.md", "done/c.md", "dir/c.md"]
        )
    finally:
        await runtime.close()
