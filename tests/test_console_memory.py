"""The console's session page shows the memory its runs used: each namespace
read or edited (from the log), with its blocks and items as the store holds them."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

pytest.importorskip("starlette")
import httpx2

from taskloom import Agent, Runtime
from taskloom.console import Console
from taskloom.memory import Block, Memory
from taskloom.models import ScriptedModel, reply

TOKEN = "t0ken-for-tests"
USER = ("user", "u1")
XSS = "<script>alert(1)</script>"


async def session_with_memory_edits(store: str) -> str:
    model = ScriptedModel(
        [
            reply(tool_calls=[("memory_append", {"block": "human", "text": f"Likes tea {XSS}"})]),
            reply(tool_calls=[("archive_save", {"text": "The cat is called Miso."})]),
            reply("noted"),
        ]
    )
    memory = Memory([Block("human", "What you know of the user")], USER)
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(Agent("helper", model, memory=memory))
        await session.run("remember me")
        await runtime.backend.memory.put(("user", "u2"), "block:human", "someone else")  # type: ignore[union-attr]
        return session.id


async def page(store: str, path: str) -> str:
    console = Console.reading(store, token=TOKEN)
    transport = httpx2.ASGITransport(app=console)
    try:
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            answer = await client.get(f"{path}?token={TOKEN}", follow_redirects=True)
            assert answer.status_code == 200
            return answer.text
    finally:
        await console.close()
        await console.runtime.close()


def section(text: str, name: str) -> str:
    found = re.search(rf'<section id="{name}".*?</section>', text, flags=re.DOTALL)
    assert found is not None, name
    return found.group(0)


async def test_a_session_page_shows_the_namespaces_its_runs_edited_with_their_items(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'console.db'}"
    sid = await session_with_memory_edits(store)
    shown = section(await page(store, f"/sessions/{sid}"), "memory")
    assert [
        html.unescape(n) for n in re.findall(r'<h3 class="namespace"><code>(.*?)</code>', shown)
    ] == [
        "user/u1",
        "user/u1/archive",
    ]
    texts = [
        html.unescape(t)
        for t in re.findall(r'<pre class="memory-text">(.*?)</pre>', shown, flags=re.DOTALL)
    ]
    assert texts == [f"Likes tea {XSS}", "The cat is called Miso."]
    assert XSS not in shown  # escaped
    assert "someone else" not in shown  # a namespace this session never used
    assert 'class="memory-block"' in shown and "version 1" in shown
    # The transcript marks each edit.
    assert "memory append: user/u1 block:human v0 → v1" in html.unescape(
        await page(store, f"/sessions/{sid}")
    )


async def test_a_session_without_memory_says_so(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'console.db'}"
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(Agent("plain", ScriptedModel(["hi"])))
        await session.run("hello")
    shown = section(await page(store, f"/sessions/{session.id}"), "memory")
    assert "No long-term memory read or edited by this session" in shown


async def test_a_session_that_only_read_its_memory_shows_its_namespaces(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'console.db'}"
    shared = ("team", "t1")
    memory = Memory(
        [Block("human", "What you know of the user"), Block("team", namespace=shared)],
        USER,
        archive=False,
    )
    async with Runtime(store=store) as runtime:
        await runtime.backend.memory.put(USER, "block:human", "Likes green tea.")  # type: ignore[union-attr]
        await runtime.backend.memory.put(("user", "u2"), "block:human", "someone else")  # type: ignore[union-attr]
        session = await runtime.create_session(
            Agent("reader", ScriptedModel(["hi"]), memory=memory)
        )
        await session.run("hello")
    shown = section(await page(store, f"/sessions/{session.id}"), "memory")
    assert [
        html.unescape(n) for n in re.findall(r'<h3 class="namespace"><code>(.*?)</code>', shown)
    ] == ["user/u1", "team/t1"]
    assert "Likes green tea." in shown and "someone else" not in shown


async def test_a_large_item_is_shown_cut_so_the_page_stays_small(tmp_path: Path) -> None:
    # A namespace holds up to 50 items shown, of up to 64 KiB each, in up to
    # 20 namespaces: shown whole, one page could be tens of megabytes.
    store = f"sqlite:///{tmp_path / 'console.db'}"
    memory = Memory([Block("human")], USER, archive=False)
    async with Runtime(store=store) as runtime:
        await runtime.backend.memory.put(USER, "notes", "<" * 60_000)  # type: ignore[union-attr]
        session = await runtime.create_session(Agent("r", ScriptedModel(["hi"]), memory=memory))
        await session.run("hello")
    shown = section(await page(store, f"/sessions/{session.id}"), "memory")
    [text] = re.findall(r'<pre class="memory-text">(.*?)</pre>', shown, flags=re.DOTALL)
    assert html.unescape(text).startswith("<" * 2000 + "\n… 58000 more characters")
    assert len(shown) < 20_000
