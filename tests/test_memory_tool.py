"""Anthropic's memory tool (`taskloom.memory.MemoryTool`) over the memory store.

The wire against the recorded Anthropic exchange (tests/corpora: the tool's
definition, its beta, the tool_use parsed, the tool_result sent back), every
command's answers and edge cases, hostile paths refused without touching the
store, compare-and-set under competing writers, and the same tool as a plain
function tool on an OpenAI-compatible server.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

from cassettes import load
from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom import Agent, Runtime
from taskloom.backends import (
    Backend,
    Memories,
    MemoryBackend,
    MemoryItem,
    MemoryValue,
    Namespace,
    PostgresBackend,
    SQLiteBackend,
    open_backend,
)
from taskloom.backends.memory import MemoryStore as SessionMemoryStore
from taskloom.errors import ConfigurationError
from taskloom.memory import EDIT_ATTEMPTS, MAX_FILES, MAX_LISTED, MemoryTool
from taskloom.messages import Message
from taskloom.models import (
    AnthropicModel,
    GeminiModel,
    ModelRequest,
    OpenAIChatModel,
    OpenAIResponsesModel,
    ScriptedModel,
    reply,
)
from taskloom.results import ToolSpec
from taskloom.testing.fake_server import FakeServer
from taskloom.testing.transport import RecordingTransport

NS: Namespace = ("user", "u1")
MEMORY_BETA = "context-management-2025-06-27"


@functools.cache
def recorded_memory_exchange() -> Any:
    # `load` parses lazily, in name order: stop at this one.
    cassettes = load("test_anthropic")
    return next(c for c in cassettes if c.name == "test_anthropic_memory_tool").interactions


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=requires_postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Memories]:
    if request.param == "memory":
        backend: Backend = MemoryBackend()
    elif request.param == "sqlite":
        backend = SQLiteBackend(tmp_path / "m.db")
    else:
        backend = PostgresBackend(PG_DSN, schema=request.getfixturevalue("pg_schema"))
    assert backend.memory is not None
    yield backend.memory
    await backend.close()


@pytest.fixture
def mem() -> Memories:
    memory = MemoryBackend().memory
    assert memory is not None
    return memory


async def run(tool: MemoryTool, **arguments: Any) -> tuple[str, bool]:
    output = await tool.call(arguments, None)
    return output.content, output.is_error


async def files(store: Memories, namespace: Namespace = NS) -> dict[str, MemoryValue]:
    return {i.key: i.value for i in await store.list(namespace) if i.namespace == namespace}


# ----- the wire: the recorded Anthropic exchange --------------------------------------------


LISTING = (
    "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items:\n"
    "31B\t/memories\n"
    "31B\t/memories/user.md"
)


async def test_the_recorded_memory_exchange_runs_against_each_store(store: Memories) -> None:
    first, second = recorded_memory_exchange()
    await store.put(NS, "user.md", "The user lives in Mexico City.\n")
    server = RecordingTransport(
        RecordingTransport.json(first.json_body), RecordingTransport.json(second.json_body)
    )
    model = AnthropicModel(
        "claude-sonnet-4-5",
        api_key="sk-test",
        http_client=server.client(),
        stream=False,
        cache=False,
        max_tokens=4096,
    )
    result = await Agent("remembers", model, tools=[MemoryTool(NS, store)]).run("Where do I live?")

    assert result.output == second.json_body["content"][0]["text"]
    sent_first, sent_second = server.requests
    for sent, recorded in ((sent_first, first), (sent_second, second)):
        assert sent.url == recorded.uri  # .../v1/messages?beta=true
        assert sent.headers["anthropic-beta"] == MEMORY_BETA
        body, want = sent.body, recorded.request_body
        assert body["tools"] == want["tools"] == [{"name": "memory", "type": "memory_20250818"}]
        assert body.get("tool_choice", {"type": "auto"}) == want["tool_choice"]
        for name in ("model", "max_tokens", "stream"):
            assert body[name] == want[name]
    assert sent_first.body["messages"] == first.request_body["messages"]
    # The second request: the history as recorded, and the tool_result the store
    # answered (the recording's test answered with a canned text instead).
    assert sent_second.body["messages"][:2] == second.request_body["messages"][:2]
    (result_turn,) = sent_second.body["messages"][2:]
    (recorded_result,) = second.request_body["messages"][2]["content"]
    assert result_turn["role"] == "user"
    assert result_turn["content"] == [{**recorded_result, "content": LISTING}]


def test_the_memory_tool_is_offered_natively_to_anthropic_and_as_a_function_elsewhere() -> None:
    spec = MemoryTool(NS).spec
    weather = ToolSpec("weather", "Weather.", {"type": "object", "properties": {}})
    request = ModelRequest(messages=[Message.user("hi")], tools=[weather, spec])
    anthropic = AnthropicModel("claude-sonnet-4-5", api_key="k", cache=True).build_body(request)
    assert anthropic["tools"][0] == {
        "name": "weather",
        "description": "Weather.",
        "input_schema": {"type": "object", "properties": {}},
    }
    # The cache breakpoint still goes on the last tool, native or not.
    assert anthropic["tools"][1] == {
        "type": "memory_20250818",
        "name": "memory",
        "cache_control": {"type": "ephemeral"},
    }
    for other in (
        OpenAIResponsesModel("gpt-4.1", api_key="k"),
        GeminiModel("gemini-2.5-flash", api_key="k"),
    ):
        body = json.dumps(other.build_body(request))
        assert "memory_20250818" not in body and '"memory"' in body
    chat = OpenAIChatModel("gpt-4.1", api_key="k").build_body(request)
    function = chat["tools"][1]["function"]
    assert function["name"] == "memory" and function["parameters"] == dict(spec.input_schema)
    assert function["parameters"]["properties"]["command"]["enum"] == [
        "view",
        "create",
        "str_replace",
        "insert",
        "delete",
        "rename",
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_the_beta_is_added_to_the_models_own_and_only_when_the_tool_is_offered(
    stream: bool,
) -> None:
    reply = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    sse = (
        'event: message_start\ndata: {"type":"message_start","message":{"id":"m","usage":{}}}\n\n'
        'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    answer = RecordingTransport.sse(sse) if stream else RecordingTransport.json(reply)
    server = RecordingTransport(default=answer)
    model = AnthropicModel(
        "claude-sonnet-4-5",
        api_key="k",
        http_client=server.client(),
        stream=stream,
        betas=[AnthropicModel.COMPACTION_BETA],
    )
    hello = [Message.user("hi")]
    await model.request(ModelRequest(messages=hello, tools=[MemoryTool(NS).spec]))
    await model.request(ModelRequest(messages=hello))
    with_tool, without = server.requests
    assert with_tool.url == "https://api.anthropic.com/v1/messages?beta=true"
    assert with_tool.headers["anthropic-beta"] == f"compact-2026-01-12,{MEMORY_BETA}"
    assert without.url == "https://api.anthropic.com/v1/messages"
    assert without.headers["anthropic-beta"] == "compact-2026-01-12"


# ----- the commands --------------------------------------------------------------------------


async def test_view_lists_two_levels_with_sizes_hiding_dot_files(store: Memories) -> None:
    tool = MemoryTool(NS, store)
    assert await run(tool, command="view", path="/memories") == (
        "Here're the files and directories up to 2 levels deep in /memories, "
        "excluding hidden items:\n0B\t/memories",
        False,
    )
    await store.put(NS, "a.md", "12345")
    await store.put(NS, "notes/user.md", "x" * 2048)
    await store.put(NS, "notes/deep/er/f.md", "abc")
    await store.put(NS, ".secret", "hidden")
    await store.put(NS, "notes/.cache/x", "hidden")
    await store.put(("user", "u1", "other"), "elsewhere.md", "another namespace")
    await store.put(("user", "u2"), "b.md", "another user")
    text, error = await run(tool, command="view", path="/memories")
    assert not error
    assert text.splitlines()[1:] == [
        "2.0K\t/memories",
        "5B\t/memories/a.md",
        "2.0K\t/memories/notes/",
        "3B\t/memories/notes/deep/",
        "2K\t/memories/notes/user.md",
    ]
    text, _ = await run(tool, command="view", path="/memories/notes/")
    assert text.splitlines() == [
        "Here're the files and directories up to 2 levels deep in /memories/notes, "
        "excluding hidden items:",
        "2.0K\t/memories/notes",
        "3B\t/memories/notes/deep/",
        "3B\t/memories/notes/deep/er/",
        "2K\t/memories/notes/user.md",
    ]
    assert await run(tool, command="view", path="/memories/nope") == (
        "The path /memories/nope does not exist. Please provide a valid path.",
        True,
    )


async def test_view_of_a_file_numbers_its_lines_and_takes_a_range(mem: Memories) -> None:
    tool = MemoryTool(NS, mem)
    await mem.put(NS, "f.md", "one\ntwo\nthree")
    assert await run(tool, command="view", path="/memories/f.md") == (
        "Here's the content of /memories/f.md with line numbers:\n"
        "     1\tone\n     2\ttwo\n     3\tthree",
        False,
    )
    assert await run(tool, command="view", path="/memories/f.md", view_range=[2, -1]) == (
        "Here's the content of /memories/f.md with line numbers:\n     2\ttwo\n     3\tthree",
        False,
    )
    text, _ = await run(tool, command="view", path="/memories/f.md", view_range=[2, 2])
    assert text.endswith("\n     2\ttwo")
    for bad in ([0, 2], [4, -1], [3, 2], [1, 9]):
        text, error = await run(tool, command="view", path="/memories/f.md", view_range=bad)
        assert error and text.startswith(f"Invalid `view_range` parameter: {bad}")
    await mem.put(NS, "j", {"k": [1]})
    text, _ = await run(tool, command="view", path="/memories/j")
    assert text.splitlines()[1:] == [
        "     1\t{",
        '     2\t  "k": [',
        "     3\t    1",
        "     4\t  ]",
        "     5\t}",
    ]


async def test_a_listing_is_capped(mem: Memories) -> None:
    for i in range(MAX_LISTED + 5):
        await mem.put(NS, f"f{i:04d}", "x")
    text, error = await run(MemoryTool(NS, mem), command="view", path="/memories")
    assert not error
    lines = text.splitlines()
    assert len(lines) == 1 + 1 + MAX_LISTED + 1
    assert lines[-1] == "(and 5 entries not shown: view a subdirectory)"


async def test_a_namespace_is_read_only_up_to_max_files_items(mem: Memories) -> None:
    for i in range(MAX_FILES + 5):
        await mem.put(NS, f"f{i:05d}", "x")
    watched = WatchedMemories(mem)
    text, error = await run(MemoryTool(NS, watched), command="view", path="/memories")  # type: ignore[arg-type]
    assert not error
    assert text.splitlines()[-1] == "(and more entries not shown: view a subdirectory)"
    assert watched.calls.count("list") == MAX_FILES // 1000


async def test_a_directory_is_read_by_its_key_prefix_whatever_else_the_namespace_holds(
    mem: Memories,
) -> None:
    # More than MAX_FILES items sort before the directory: a directory is
    # read by its own keys, so it is seen, and in one page.
    for i in range(MAX_FILES + 5):
        await mem.put(NS, f"a/f{i:05d}", "x")
    await mem.put(NS, "notes/one.md", "1")
    await mem.put(NS, "notes/two.md", "2")
    watched = WatchedMemories(mem)
    tool = MemoryTool(NS, watched)  # type: ignore[arg-type]
    text, error = await run(tool, command="view", path="/memories/notes")
    assert not error, text
    assert "/memories/notes/one.md" in text and "/memories/notes/two.md" in text
    assert watched.calls.count("list") == 1
    text, error = await run(
        tool, command="rename", old_path="/memories/notes", new_path="/memories/kept"
    )
    assert (text, error) == ("Successfully renamed /memories/notes to /memories/kept", False)
    assert (await mem.get(NS, "kept/two.md")) is not None
    assert await mem.get(NS, "notes/two.md") is None


async def test_create_refuses_what_exists_and_files_as_directories(store: Memories) -> None:
    tool = MemoryTool(NS, store)
    assert await run(tool, command="create", path="/memories/a/b.md", file_text="hi") == (
        "File created successfully at: /memories/a/b.md",
        False,
    )
    assert (await files(store)) == {"a/b.md": "hi"}
    for path in ("/memories/a/b.md", "/memories/a", "/memories"):
        assert await run(tool, command="create", path=path, file_text="x") == (
            f"File {path} already exists",
            True,
        )
    assert await run(tool, command="create", path="/memories/a/b.md/c", file_text="x") == (
        "The path /memories/a/b.md is a file, not a directory",
        True,
    )
    text, error = await run(tool, command="create", path="/memories/big", file_text="x" * 70_000)
    assert error and "refused the write of /memories/big" in text
    assert await run(tool, command="create", path="/memories/c") == (
        "The `file_text` parameter is required for the `create` command",
        True,
    )
    assert (await files(store)) == {"a/b.md": "hi"}


async def test_str_replace_needs_exactly_one_occurrence(store: Memories) -> None:
    tool = MemoryTool(NS, store)
    await store.put(NS, "f.md", "a\nb\nc\nd\ne\nf\ng\nb")
    text, error = await run(
        tool, command="str_replace", path="/memories/f.md", old_str="b", new_str="B"
    )
    assert (text, error) == (
        "No replacement was performed. Multiple occurrences of old_str `b` in lines: 2, 8. "
        "Please ensure it is unique",
        True,
    )
    assert await run(
        tool, command="str_replace", path="/memories/f.md", old_str="zz", new_str=""
    ) == (
        "No replacement was performed, old_str `zz` did not appear verbatim in /memories/f.md.",
        True,
    )
    text, error = await run(
        tool, command="str_replace", path="/memories/f.md", old_str="e\n", new_str="E!\n"
    )
    assert not error
    assert text == (
        "The memory file has been edited. Here is the snippet showing the change "
        "(with line numbers):\n     3\tc\n     4\td\n     5\tE!\n     6\tf\n     7\tg"
    )
    assert (await files(store))["f.md"] == "a\nb\nc\nd\nE!\nf\ng\nb"
    assert (await store.get(NS, "f.md")).version == 2  # type: ignore[union-attr]
    assert (await run(tool, command="str_replace", path="/memories/no", old_str="a", new_str=""))[1]
    await store.put(NS, "d/x", "a")
    assert await run(tool, command="str_replace", path="/memories/d", old_str="a", new_str="") == (
        "The path /memories/d is not a file.",
        True,
    )


async def test_insert_takes_a_line_within_the_file(store: Memories) -> None:
    tool = MemoryTool(NS, store)
    await store.put(NS, "f.md", "one\ntwo\n")
    assert await run(
        tool, command="insert", path="/memories/f.md", insert_line=0, insert_text="zero\n"
    ) == (
        "The file /memories/f.md has been edited.",
        False,
    )
    assert await run(
        tool, command="insert", path="/memories/f.md", insert_line=3, insert_text="end"
    ) == (
        "The file /memories/f.md has been edited.",
        False,
    )
    assert (await files(store))["f.md"] == "zero\none\ntwo\nend\n"
    for line in (-1, 5):
        assert await run(
            tool, command="insert", path="/memories/f.md", insert_line=line, insert_text="x"
        ) == (
            f"Invalid `insert_line` parameter: {line}. It should be within the range [0, 4].",
            True,
        )
    assert (await files(store))["f.md"] == "zero\none\ntwo\nend\n"


async def test_delete_a_file_or_a_directory_never_the_root(store: Memories) -> None:
    tool = MemoryTool(NS, store)
    for key in ("keep.md", "d/a", "d/e/b", "dx"):
        await store.put(NS, key, key)
    assert await run(tool, command="delete", path="/memories/d") == (
        "Successfully deleted /memories/d",
        False,
    )
    assert await run(tool, command="delete", path="/memories/keep.md") == (
        "Successfully deleted /memories/keep.md",
        False,
    )
    assert (await files(store)) == {"dx": "dx"}
    assert await run(tool, command="delete", path="/memories") == (
        "Cannot delete the /memories directory itself",
        True,
    )
    assert await run(tool, command="delete", path="/memories/d") == (
        "The path /memories/d does not exist",
        True,
    )


async def test_rename_moves_files_and_directories_onto_free_paths_only(store: Memories) -> None:
    tool = MemoryTool(NS, store)
    for key, value in (("a.md", "A"), ("b.md", "B"), ("d/x", "X"), ("d/y/z", "Z")):
        await store.put(NS, key, value)
    assert await run(
        tool, command="rename", old_path="/memories/a.md", new_path="/memories/b.md"
    ) == (
        "The destination /memories/b.md already exists",
        True,
    )
    assert await run(tool, command="rename", old_path="/memories/a.md", new_path="/memories/d") == (
        "The destination /memories/d already exists",
        True,
    )
    assert await run(
        tool, command="rename", old_path="/memories/a.md", new_path="/memories/n/a.md"
    ) == (
        "Successfully renamed /memories/a.md to /memories/n/a.md",
        False,
    )
    assert await run(tool, command="rename", old_path="/memories/d", new_path="/memories/e") == (
        "Successfully renamed /memories/d to /memories/e",
        False,
    )
    assert (await files(store)) == {"b.md": "B", "e/x": "X", "e/y/z": "Z", "n/a.md": "A"}
    assert (await run(tool, command="rename", old_path="/memories/e", new_path="/memories/e/f"))[1]
    assert (await run(tool, command="rename", old_path="/memories/q", new_path="/memories/r")) == (
        "The path /memories/q does not exist",
        True,
    )
    assert (await run(tool, command="rename", old_path="/memories", new_path="/memories/r"))[1]
    assert (await files(store)) == {"b.md": "B", "e/x": "X", "e/y/z": "Z", "n/a.md": "A"}


async def test_unknown_commands_and_bad_arguments_are_answered_as_errors(mem: Memories) -> None:
    tool = MemoryTool(NS, mem)
    text, error = await run(tool, command="format")
    assert error and "must be one of" in text
    text, error = await run(tool, command="view", path="/memories", extra=1)
    assert error
    assert await run(tool, command="view") == (
        "The `path` parameter is required for the `view` command",
        True,
    )


# ----- paths that could reach elsewhere -----------------------------------------------------


class WatchedMemories:
    """A `Memories` that records every call made to it."""

    def __init__(self, inner: Memories) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(self.inner, name)


HOSTILE = [
    "/memories/../etc/passwd",
    "/memories/..",
    "/memories/a/../../b",
    "/memories/./a",
    "/memories/a/./b",
    "/memories/%2e%2e/x",
    "/memories/%2E%2e/x",
    "/memories/a%2fb",
    "/memories/a%5cb",
    "/memories/..%2fx",
    "/memories/．．/x",  # full-width dots: NFKC makes them `..`
    "/memories/a／..",  # full-width solidus
    "/memories/\u2024\u2024/x",  # one-dot leaders
    "/memories/a\\..\\b",
    "/memories\\..\\etc",
    "/memories/a\x00b",
    "/memories/a\nb",
    "/memories//a",
    "/memories/a//b",
    "/memories/ ../x",
    "/memories/" + "a" * 600,
    "/memoriesx/a",
    "/memories-evil/a",
    "memories/a",
    "/etc/passwd",
    "/",
    "",
    "~/memories/a",
    "/tmp/memories/a",
    "/memories/\ud800",
    "file:///memories/a",
]


@pytest.mark.parametrize("path", HOSTILE)
@pytest.mark.parametrize(
    "command",
    [
        {"command": "view"},
        {"command": "create", "file_text": "pwned"},
        {"command": "str_replace", "old_str": "a", "new_str": "b"},
        {"command": "insert", "insert_line": 0, "insert_text": "x"},
        {"command": "delete"},
        {"command": "rename", "new_path": "/memories/fine"},
    ],
    ids=lambda c: c["command"],
)
async def test_hostile_paths_are_refused_without_touching_the_store(
    mem: Memories, path: str, command: dict[str, Any]
) -> None:
    watched = WatchedMemories(mem)
    tool = MemoryTool(NS, watched)  # type: ignore[arg-type]
    arguments = {**command, ("old_path" if command["command"] == "rename" else "path"): path}
    text, error = await run(tool, **arguments)
    assert error, text
    assert watched.calls == []
    assert "pwned" not in text and len(text) < 400


async def test_a_rename_onto_a_hostile_path_is_refused_too(mem: Memories) -> None:
    await mem.put(NS, "a", "A")
    watched = WatchedMemories(mem)
    tool = MemoryTool(NS, watched)  # type: ignore[arg-type]
    assert await run(tool, command="rename", old_path="/memories/a", new_path="/memories/../a") == (
        "Path /memories/../a would escape /memories directory",
        True,
    )
    assert watched.calls == []


async def test_keys_no_path_names_stay_out_of_view(mem: Memories) -> None:
    # Items the host wrote under keys that are not paths (".." parts, empty parts).
    await mem.put(NS, "../x", "up")
    await mem.put(NS, "a//b", "empty part")
    await mem.put(NS, "ok.md", "fine")
    text, _ = await run(MemoryTool(NS, mem), command="view", path="/memories")
    assert text.splitlines()[2:] == ["4B\t/memories/ok.md"]


# ----- compare-and-set ------------------------------------------------------------------------


class CompetingWriter:
    """A `Memories` where another writer edits `key` just before each of the
    first `times` puts of it (between this writer's read and its write)."""

    def __init__(self, inner: Memories, key: str, times: int) -> None:
        self.inner = inner
        self.key = key
        self.left = times
        self.competed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def put(
        self, namespace: Namespace, key: str, value: MemoryValue, **options: Any
    ) -> MemoryItem:
        if key == self.key and self.left:
            self.left -= 1
            self.competed += 1
            current = await self.inner.get(namespace, key)
            assert current is not None and isinstance(current.value, str)
            await self.inner.put(namespace, key, current.value + f"other{self.competed}\n")
        return await self.inner.put(namespace, key, value, **options)


async def test_an_edit_raced_by_another_writer_is_redone_on_the_new_text(store: Memories) -> None:
    await store.put(NS, "f.md", "start\n")
    racing = CompetingWriter(store, "f.md", times=2)
    tool = MemoryTool(NS, racing)  # type: ignore[arg-type]
    assert await run(
        tool, command="insert", path="/memories/f.md", insert_line=1, insert_text="mine"
    ) == (
        "The file /memories/f.md has been edited.",
        False,
    )
    # Both of the other writer's edits are kept, and this one applied on top.
    assert (await files(store))["f.md"] == "start\nmine\nother1\nother2\n"


async def test_an_edit_that_keeps_losing_the_race_is_reported_and_loses_nothing(
    mem: Memories,
) -> None:
    await mem.put(NS, "f.md", "start\n")
    racing = CompetingWriter(mem, "f.md", times=EDIT_ATTEMPTS)
    tool = MemoryTool(NS, racing)  # type: ignore[arg-type]
    text, error = await run(
        tool, command="str_replace", path="/memories/f.md", old_str="start", new_str="S"
    )
    assert error and "kept changing" in text
    others = "".join(f"other{i}\n" for i in range(1, EDIT_ATTEMPTS + 1))
    assert (await files(mem))["f.md"] == "start\n" + others


async def test_an_edit_whose_text_went_away_meanwhile_says_so(mem: Memories) -> None:
    await mem.put(NS, "f.md", "old\n")

    class Rewriter(CompetingWriter):
        async def put(
            self, namespace: Namespace, key: str, value: MemoryValue, **options: Any
        ) -> MemoryItem:
            if self.left:
                self.left = 0
                await self.inner.put(namespace, key, "rewritten\n")
            return await self.inner.put(namespace, key, value, **options)

    tool = MemoryTool(NS, Rewriter(mem, "f.md", 1))  # type: ignore[arg-type]
    assert await run(
        tool, command="str_replace", path="/memories/f.md", old_str="old", new_str="new"
    ) == (
        "No replacement was performed, old_str `old` did not appear verbatim in /memories/f.md.",
        True,
    )
    assert (await files(mem))["f.md"] == "rewritten\n"


class DeleteRacer:
    """A `Memories` where another writer rewrites `key` just before this
    writer's first delete of it (between the command's read and its delete)."""

    def __init__(self, inner: Memories, key: str) -> None:
        self.inner = inner
        self.key = key
        self.raced = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def delete(self, namespace: Namespace, key: str, **options: Any) -> bool:
        if key == self.key and not self.raced:
            self.raced = True
            await self.inner.put(namespace, key, "changed meanwhile")
        return await self.inner.delete(namespace, key, **options)


async def test_a_command_rerun_after_a_race_writes_anew_with_its_calls_key(
    store: Memories,
) -> None:
    # A command whose attempt applied some writes before losing a race is
    # rerun on fresh reads; its new writes must not be answered with the
    # spent attempt's keys: the rename deleted its file without the copy,
    # the directory delete was refused half done.
    await store.put(NS, "a.md", "first")
    await store.put(NS, "dir/x.md", "x")
    await store.put(NS, "dir/y.md", "y")
    calls = [
        ({"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/b.md"}, "a.md"),
        ({"command": "delete", "path": "/memories/dir"}, "dir/y.md"),
    ]
    answers = []
    for arguments, racing in calls:
        model = ScriptedModel([reply(tool_calls=[("memory", arguments)]), reply("done")])
        tool = MemoryTool(NS, DeleteRacer(store, racing))  # type: ignore[arg-type]
        assert (await Agent("a", model, tools=[tool]).run("tidy up")).output == "done"
        last = model.requests[1].messages[-1]
        answers += [(b.content, b.is_error) for b in last.blocks if hasattr(b, "is_error")]
        if racing == "a.md":
            assert (await files(store))["b.md"] == "changed meanwhile"
    assert answers == [
        ("Successfully renamed /memories/a.md to /memories/b.md", False),
        ("Successfully deleted /memories/dir", False),
    ]
    assert (await files(store)) == {"b.md": "changed meanwhile"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=requires_postgres)])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Backend]:
    if request.param == "sqlite":
        return functools.partial(SQLiteBackend, tmp_path / "m.db")
    return functools.partial(PostgresBackend, PG_DSN, schema=request.getfixturevalue("pg_schema"))


async def test_concurrent_inserts_from_two_stores_lose_no_edit(
    durable: Callable[[], Backend],
) -> None:
    one, two = durable(), durable()
    try:
        assert one.memory is not None and two.memory is not None
        await one.memory.put(NS, "log.md", "")
        tools = [MemoryTool(NS, one.memory), MemoryTool(NS, two.memory)]
        answers = await asyncio.gather(
            *(
                run(
                    tools[i % 2],
                    command="insert",
                    path="/memories/log.md",
                    insert_line=0,
                    insert_text=f"edit {i}",
                )
                for i in range(24)
            )
        )
        applied = {f"edit {i}" for i, (_, error) in enumerate(answers) if not error}
        refused = [text for text, error in answers if error]
        assert all("kept changing" in text for text in refused)
        final = (await files(one.memory))["log.md"]
        assert isinstance(final, str)
        assert sorted(final.splitlines()) == sorted(applied)
        assert len(applied) >= 1
    finally:
        await one.close()
        await two.close()


CHILD = Path(__file__).resolve().parent / "memory_tool_child.py"
PROCESS_EDITS = 150


async def test_two_processes_inserting_into_one_file_lose_no_edit(
    store_url: tuple[str, str],
) -> None:
    url, schema = store_url
    backend = open_backend(url, **({} if schema == "-" else {"schema": schema}))
    assert backend.memory is not None
    try:
        await backend.memory.put(("race",), "log.md", "")
        children = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                str(CHILD),
                url,
                schema,
                name,
                str(PROCESS_EDITS),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            for name in ("a", "b")
        ]
        outcomes = []
        for child in children:
            out, err = await asyncio.wait_for(child.communicate(), 120)
            assert child.returncode == 0, err.decode()
            outcomes.append(json.loads(out))
        applied = [line for o in outcomes for line in o["applied"]]
        refused = [line for o in outcomes for line in o["refused"]]
        item = await backend.memory.get(("race",), "log.md")
        assert item is not None and isinstance(item.value, str)
        # Every edit answered "edited" is in the file exactly once; no other is.
        assert sorted(item.value.splitlines()) == sorted(applied)
        assert item.version == 1 + len(applied)
        assert len(applied) + len(refused) == 2 * PROCESS_EDITS
        print(f"{url.split(':')[0]}: {len(applied)} applied, {len(refused)} reported")
    finally:
        await backend.close()


# ----- other providers, and the runtime's store ------------------------------------------------


async def test_on_an_openai_compatible_server_the_function_tool_edits_the_store(
    mem: Memories,
) -> None:
    async with FakeServer() as server, httpx2.AsyncClient(timeout=10) as client:
        server.script(
            FakeServer.reply(
                tool_calls=[
                    (
                        "memory",
                        {"command": "create", "path": "/memories/prefs.md", "file_text": "tea\n"},
                        "call_1",
                    )
                ]
            ),
            FakeServer.reply(
                tool_calls=[
                    (
                        "memory",
                        {
                            "command": "str_replace",
                            "path": "/memories/prefs.md",
                            "old_str": "tea",
                            "new_str": "green tea",
                        },
                        "call_2",
                    )
                ]
            ),
            FakeServer.reply("Noted."),
        )
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k", http_client=client)
        result = await Agent("a", model, tools=[MemoryTool(NS, mem)]).run("I like tea")
        assert result.output == "Noted."
        first = server.requests[0].body
        (tool,) = first["tools"]
        assert tool["type"] == "function" and tool["function"]["name"] == "memory"
        third = server.requests[2].body["messages"]
        assert third[-1]["content"].startswith("The memory file has been edited.")
    assert (await files(mem)) == {"prefs.md": "green tea\n"}


async def test_without_a_store_the_tool_uses_the_runtimes_memory() -> None:
    backend = MemoryBackend()
    tool = MemoryTool(NS)
    async with Runtime(store=backend) as runtime:
        bound = runtime.tools_for(Agent("a", ScriptedModel([]), tools=[tool]))["memory"]
        assert isinstance(bound, MemoryTool) and bound.store is backend.memory
        assert (await run(bound, command="create", path="/memories/x", file_text="1"))[1] is False
    assert backend.memory is not None and (await files(backend.memory)) == {"x": "1"}
    text, error = await run(tool, command="view", path="/memories")
    assert error and "has no store" in text
    with pytest.raises(ConfigurationError, match="has none"):
        Runtime(store=Backend(SessionMemoryStore())).tools_for(
            Agent("a", ScriptedModel([]), tools=[tool])
        )


def test_a_namespace_is_a_non_empty_tuple_of_strings() -> None:
    for bad in ((), ("",), ["user"], ("a", 1)):
        with pytest.raises(ConfigurationError):
            MemoryTool(bad)  # type: ignore[arg-type]
