"""The web console over plain HTTP: every route, its access rules, what each
page shows, live updates and acting. (The same pages in a real browser:
test_console_browser.py.)"""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

pytest.importorskip("starlette")
import httpx2
import markupsafe

from console_sessions import (
    GIFT_ARGS,
    XSS,
    fan_out_session,
    gifts_agent,
    moved_session,
    parked_session,
    rich_session,
    xss_session,
)
from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom import Agent, Budget, Price, RunOptions, Runtime, Usage
from taskloom.backends import BackgroundActivity, BackgroundNotice, PostgresBackend, SessionMeta
from taskloom.backends.postgres import PostgresStore
from taskloom.background import BackgroundService
from taskloom.console import Console
from taskloom.delegation import SubAgent
from taskloom.entries import (
    ApprovalDecision,
    CompactionEntry,
    DeferredEntry,
    DeferredItem,
    Entry,
    RunFinishedEntry,
    Steer,
    StopRequest,
)
from taskloom.models import FunctionModel, ScriptedModel, reply

TOKEN = "t0ken-for-tests"
COOKIE = "taskloom_console"
"""The cookie the console keeps its token in (a proxy in front of it may need its name)."""


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'console.db'}"


@asynccontextmanager
async def browsing(
    console: Console, *, signed_in: bool = True
) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=console)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client:
        if signed_in:
            answer = await client.get(f"/?token={console.token}", follow_redirects=True)
            assert answer.status_code == 200
        try:
            yield client
        finally:
            await console.close()
            await console.runtime.close()


def reading(store: str, **options: object) -> Console:
    return Console.reading(store, token=TOKEN, poll_interval=0.02, **options)  # type: ignore[arg-type]


def acting(store: str, *replies: object) -> Console:
    model = ScriptedModel(list(replies))  # type: ignore[arg-type]
    runtime = Runtime(store=store, agents=[gifts_agent(model)])
    return Console.acting(runtime, token=TOKEN, poll_interval=0.02)


def pre(page: str, css_class: str) -> list[str]:
    """The unescaped text of every <pre class=...> of a page."""
    found = re.findall(rf'<pre class="{css_class}">(.*?)</pre>', page, flags=re.DOTALL)
    return [html.unescape(t) for t in found]


async def entries_of(store: str, session_id: str) -> list[Entry]:
    async with Runtime(store=store) as runtime:
        return await runtime.store.load(session_id)


# ---------------------------------------------------------------- access


async def test_every_route_answers_401_without_the_token(store: str) -> None:
    sid = await parked_session(store)
    async with browsing(reading(store), signed_in=False) as client:
        gets = [
            "/",
            "/live",
            f"/sessions/{sid}",
            f"/sessions/{sid}/live",
            "/static/console.css",
            "/static/console.js",
            "/sessions/nope",
        ]
        posts = [f"/sessions/{sid}/{action}" for action in ("decide", "resume", "steer", "stop")]
        for path in gets:
            answer = await client.get(path)
            assert answer.status_code == 401, path
            assert "Send Ada" not in answer.text and sid not in answer.text
        for path in posts:
            assert (await client.post(path, data={"call_id": "call_1"})).status_code == 401, path
        assert (await client.get(f"/sessions/{sid}?token=wrong")).status_code == 401
        client.cookies.set(COOKIE, "forged")
        assert (await client.get("/")).status_code == 401
    assert not [e for e in await entries_of(store, sid) if isinstance(e.payload, ApprovalDecision)]


async def test_the_token_is_given_once_then_kept_in_a_strict_httponly_cookie(store: str) -> None:
    sid = await parked_session(store)
    async with browsing(reading(store), signed_in=False) as client:
        answer = await client.get(f"/sessions/{sid}?run=0&token={TOKEN}")
        # A redirect to the same page without the token in its address.
        assert answer.status_code == 303
        assert answer.headers["location"] == f"/sessions/{sid}?run=0"
        assert TOKEN not in answer.text
        cookie = answer.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        assert TOKEN not in cookie
        page = await client.get(f"/sessions/{sid}")
        assert page.status_code == 200 and "Send Ada something nice." in page.text
        assert page.headers["referrer-policy"] == "same-origin"
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert "script-src 'self'" in page.headers["content-security-policy"]


async def test_a_token_link_followed_from_another_site_goes_on_by_a_page(store: str) -> None:
    # A redirect would continue the cross-site chain, which carries no strict
    # cookie: the browser goes on from a page of the console's own instead.
    async with browsing(reading(store), signed_in=False) as client:
        answer = await client.get(
            f"/?run=0&token={TOKEN}", headers={"sec-fetch-site": "cross-site"}
        )
        assert answer.status_code == 200 and "location" not in answer.headers
        assert answer.headers["set-cookie"].startswith(f"{COOKIE}=")
        assert 'url=/?run=0"' in answer.text and TOKEN not in answer.text


# ---------------------------------------------------------------- pages


async def test_sessions_table_filters_and_children(store: str) -> None:
    parked = await parked_session(store)
    rich = await rich_session(store)
    lead = await fan_out_session(store)
    async with browsing(reading(store)) as client:
        page = (await client.get("/")).text
        rows = re.findall(r'<tr class="status-([a-z_]+)" data-session="([^"]+)">', page)
        assert rows == [("completed", lead), ("completed", rich), ("awaiting_approval", parked)]
        parked_row = page[page.index(f'data-session="{parked}"') :]
        assert '<span class="pending-count">1</span>' in parked_row.split("</tr>")[0]
        everything = (await client.get("/?scope=all")).text
        assert everything.count('class="child-of"') == 3
        waiting = (await client.get("/?status=awaiting_approval")).text
        assert re.findall(r'data-session="([^"]+)">', waiting) == [parked]
        readers = (await client.get("/?agent=reader")).text
        assert re.findall(r'data-session="([^"]+)">', readers) == [rich]
        assert "No sessions match" in (await client.get("/?status=failed")).text


async def test_sessions_table_pages_newest_first(store: str) -> None:
    async with Runtime(store=store) as runtime:
        for n in range(30):
            await runtime.store.create(SessionMeta(f"s{n:02d}", "bulk", None, 1000.0 + n))
    async with browsing(reading(store)) as client:
        first = (await client.get("/")).text
        ids = re.findall(r'data-session="([^"]+)">', first)
        assert ids == [f"s{n:02d}" for n in range(29, 4, -1)]
        assert 'rel="next" href="/?scope=top&amp;page=2"' in first
        second = (await client.get("/?page=2")).text
        assert re.findall(r'data-session="([^"]+)">', second) == [
            f"s{n:02d}" for n in range(4, -1, -1)
        ]
        assert 'rel="next"' not in second and 'rel="prev"' in second


async def test_session_page_shows_the_transcript_where_things_landed(store: str) -> None:
    sid = await rich_session(store)
    async with browsing(reading(store)) as client:
        page = (await client.get(f"/sessions/{sid}")).text
    transcript = page[page.index('id="transcript"') :]
    # The steering is shown where it was sent, and the user turn that folded it in says so.
    steer_at = transcript.index('class="mark mark-steer')
    assert steer_at < transcript.index("What is in the log?") < transcript.index("folds in #1")
    # Reasoning is folded; a long output is collapsed behind a preview.
    assert re.search(r'<details class="thinking" id="[^"]+"><summary>reasoning', transcript)
    assert "I should look at the log." in transcript
    long = re.search(
        r'<details class="long" id="result-call_1">(.*?)</details>', transcript, re.DOTALL
    )
    assert long is not None and "show all (2989 characters, 60 lines)" in long.group(1)
    assert "line 59:" in long.group(1) and "line 59:" not in long.group(1).split("</summary>")[0]
    assert "run ended: completed · 2 rounds" in transcript


async def test_a_parked_call_shows_its_exact_arguments_read_only(store: str) -> None:
    sid = await parked_session(store)
    async with browsing(reading(store)) as client:
        page = (await client.get(f"/sessions/{sid}")).text
    assert pre(page, "arguments") == [json.dumps(GIFT_ARGS, indent=2, sort_keys=True)]
    assert 'class="verdict waiting"' in page
    assert "read-only: this console was started without --app" in page
    assert "<form" not in page.split('id="tree"')[0].split('id="actions"')[1]


async def test_text_from_the_log_renders_as_text(store: str) -> None:
    sid = await xss_session(store)
    async with browsing(reading(store)) as client:
        pages = [(await client.get(f"/sessions/{sid}")).text, (await client.get("/")).text]
    for page in pages:
        assert "<script>window" not in page and "<img src=x" not in page
        assert page.count("<script") == 1  # the console's own, from /static
        assert str(markupsafe.escape(XSS)) in page
    assert pages[0].count("&lt;script&gt;window.__xss = 1&lt;/script&gt;") >= 4


async def test_delegation_tree_nests_each_child_under_its_call(store: str) -> None:
    sid = await fan_out_session(store)
    async with browsing(reading(store)) as client:
        page = (await client.get(f"/sessions/{sid}")).text
        tree = page[page.index('id="tree"') : page.index('id="timeline"')]
        groups = re.findall(r'<li class="call-group">(.*?)</ul>\s*</li>', tree, flags=re.DOTALL)
        assert len(groups) == 3
        children = {}
        for n, group in enumerate(groups):
            assert f"call_r{n}" in group and "researcher" in group
            found = re.findall(r'data-session="([^"]+)"', group)
            assert len(found) == 1
            children[found[0]] = group
            assert re.search(rf"r{n}#{found[0][:8]}", group)  # the origin label
            assert '<span class="status status-done">done</span>' in group
            assert "4 tok" in group and f"find fact {n}" in group
        child_id = next(iter(children))
        child_page = (await client.get(f"/sessions/{child_id}")).text
        assert f'<a href="/sessions/{sid}">' in child_page and "fact 0" in child_page


async def test_timeline_draws_three_parallel_calls_in_lanes_of_their_own(store: str) -> None:
    sid = await fan_out_session(store)
    async with browsing(reading(store)) as client:
        page = (await client.get(f"/sessions/{sid}")).text
    bars = re.findall(
        r'<rect class="bar bar-(\w+)" data-kind="\w+" data-lane="(\d+)" '
        r'data-start="([\d.]+)" data-end="([\d.]+)"',
        page,
    )
    tools = [(int(lane), float(a), float(b)) for kind, lane, a, b in bars if kind == "tool"]
    assert len(tools) == 3 and len({lane for lane, _, _ in tools}) == 3
    latest_start = max(a for _, a, _ in tools)
    earliest_end = min(b for _, _, b in tools)
    assert latest_start < earliest_end  # all three ran at the same time
    models = [b for b in bars if b[0] == "model"]
    assert len(models) == 2 + 3  # the parent's two rounds, one per child
    assert page.count('class="round-label"') == 2


async def test_background_activities_and_notices(store: str) -> None:
    sid = await rich_session(store)
    async with Runtime(store=store) as runtime:
        service = BackgroundService.for_store(runtime.store)
        await service.registry.add(sid, BackgroundActivity("a1", "shell", "pytest -q", 1.0), 60)
        tail = "\n".join(f"out {n}" for n in range(40))
        await service.inbox.push(sid, BackgroundNotice("n1", "a0", "shell", tail, "failed", 2.0))
        await service.close() if hasattr(service, "close") else None
    async with browsing(reading(store)) as client:
        page = (await client.get(f"/sessions/{sid}")).text
    section = page[page.index('id="background"') : page.index('id="transcript"')]
    assert "pytest -q" in section and "<code>a1</code>" in section
    preview = re.search(r'<pre class="preview">(.*?)</pre>', section, re.DOTALL)
    assert preview is not None
    assert preview.group(1).splitlines() == [f"out {n}" for n in range(20, 40)]
    assert "None delivered." in section


async def test_nothing_secret_is_shown(store: str) -> None:
    secret = "sk-abcdefghijklmnopqrstuv"
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(gifts_agent(ScriptedModel([])))
        await session.set_model(
            f"openai:gpt-4.1@https://admin:hunter2@llm.example/v1?api_key={secret}"
        )
    async with browsing(reading(store)) as client:
        page = (await client.get(f"/sessions/{session.id}")).text
        table = (await client.get("/")).text
    for text in (page, table):
        assert secret not in text and "hunter2" not in text and TOKEN not in text
    assert "llm.example" in page
    # A model that names itself with a bearer token shows it hidden.
    async with Runtime(store=store) as runtime:
        leaky = ScriptedModel(["hi"], name="proxy Authorization: Bearer abcdefghijkl")
        chatty = await runtime.create_session(gifts_agent(leaky))
        await chatty.run("hello")
    async with browsing(reading(store)) as client:
        page = (await client.get(f"/sessions/{chatty.id}")).text
    assert "abcdefghijkl" not in page and "Authorization: Bearer ***" in page


async def test_unknown_sessions_and_unknown_entry_kinds(store: str) -> None:
    sid = await rich_session(store)
    async with Runtime(store=store) as runtime:
        await runtime.store.append(sid, Entry("custom_note", {"summary": "<b>older turns</b>"}))
        await runtime.store.append(
            sid, Entry.of(CompactionEntry("<i>the summary</i>", 3, "summary", 900, 200))
        )
    async with browsing(reading(store)) as client:
        assert (await client.get("/sessions/no-such-session")).status_code == 404
        page = (await client.get(f"/sessions/{sid}")).text
    assert '<span class="mark-title">custom_note</span>' in page
    assert "<b>older turns</b>" not in page  # a kind this version does not know: name only
    assert "compaction: earlier messages summarized (~900 → ~200 tokens)" in page
    assert "&lt;i&gt;the summary&lt;/i&gt;" in page and "<i>the summary</i>" not in page


# ---------------------------------------------------------------- live updates


async def test_the_event_stream_says_changed_once_the_log_moves(store: str) -> None:
    sid = await parked_session(store)
    console = reading(store)
    async with browsing(console) as client:
        page = (await client.get(f"/sessions/{sid}")).text
        live = html.unescape(re.search(r'data-live="([^"]+)"', page).group(1))  # type: ignore[union-attr]
        assert live.startswith(f"/sessions/{sid}/live?since=")
        stale = await client.get(f"/sessions/{sid}/live?since=old")
        assert "event: changed" in stale.text and stale.headers["content-type"].startswith(
            "text/event-stream"
        )
        waiting = asyncio.create_task(client.get(live))
        await asyncio.sleep(0.1)
        assert not waiting.done()  # nothing changed: the stream waits
        async with Runtime(store=store) as runtime:
            await runtime.store.append(sid, Entry.of(Steer("hurry up")))
        changed = await asyncio.wait_for(waiting, 5)
        new_id = re.search(r"^id: (\w+)$", changed.text, re.MULTILINE).group(1)  # type: ignore[union-attr]
        # A reconnecting browser sends the id it saw: no news, no event.
        again = asyncio.create_task(client.get(live, headers={"last-event-id": new_id}))
        await asyncio.sleep(0.1)
        assert not again.done()
        async with Runtime(store=store) as runtime:
            await runtime.store.append(sid, Entry.of(Steer("really")))
        assert "event: changed" in (await asyncio.wait_for(again, 5)).text


async def test_the_sessions_table_stream_sees_new_sessions(store: str) -> None:
    await parked_session(store)
    async with browsing(reading(store)) as client:
        page = (await client.get("/")).text
        live = html.unescape(re.search(r'data-live="([^"]+)"', page).group(1))  # type: ignore[union-attr]
        waiting = asyncio.create_task(client.get(live))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        await rich_session(store)
        assert "event: changed" in (await asyncio.wait_for(waiting, 5)).text


# ---------------------------------------------------------------- acting


async def page_and_csrf(client: httpx2.AsyncClient, sid: str) -> tuple[str, str]:
    page = (await client.get(f"/sessions/{sid}")).text
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match is not None
    return page, match.group(1)


async def test_approving_the_last_call_resumes_the_run(store: str) -> None:
    sid = await parked_session(store)
    console = acting(store, reply("Sent. Ada will love it."))
    async with browsing(console) as client:
        page, csrf = await page_and_csrf(client, sid)
        hashes = re.findall(r'name="hash" value="([0-9a-f]+)"', page)
        assert len(hashes) == 1
        form = {"call_id": "call_1", "hash": hashes[0], "verdict": "approve", "note": "ok"}
        assert (await client.post(f"/sessions/{sid}/decide", data=form)).status_code == 403
        wrong = {**form, "csrf": csrf, "hash": "0" * 64}
        assert (await client.post(f"/sessions/{sid}/decide", data=wrong)).status_code == 303
        assert not [
            e for e in await entries_of(store, sid) if isinstance(e.payload, ApprovalDecision)
        ]
        done = await client.post(f"/sessions/{sid}/decide", data={**form, "csrf": csrf})
        assert done.status_code == 303 and done.headers["location"] == f"/sessions/{sid}#actions"
        await console.wait_idle()
        page = (await client.get(f"/sessions/{sid}")).text
    assert "not the ones shown" in page or "approved call_1; resuming" in page
    assert 'data-status="completed"' in page and "Sent. Ada will love it." in page
    assert "sent Ada &lt;Lovelace&gt; a gift worth 900" in page
    ends = [
        e.payload for e in await entries_of(store, sid) if isinstance(e.payload, RunFinishedEntry)
    ]
    assert [p.status.value for p in ends] == ["awaiting_approval", "completed"]


async def test_denying_with_a_note_resumes_with_the_denial(store: str) -> None:
    sid = await parked_session(store)
    console = acting(store, reply("Understood, no gift."))
    async with browsing(console) as client:
        page, csrf = await page_and_csrf(client, sid)
        hash_ = re.search(r'name="hash" value="([0-9a-f]+)"', page).group(1)  # type: ignore[union-attr]
        form = {
            "csrf": csrf,
            "call_id": "call_1",
            "hash": hash_,
            "verdict": "deny",
            "note": "too much",
        }
        await client.post(f"/sessions/{sid}/decide", data=form)
        await console.wait_idle()
        page = (await client.get(f"/sessions/{sid}")).text
    assert "Note from the user: too much" in page and 'data-status="completed"' in page
    decisions = [
        e.payload for e in await entries_of(store, sid) if isinstance(e.payload, ApprovalDecision)
    ]
    assert [(d.approved, d.note) for d in decisions] == [(False, "too much")]


async def test_steer_stop_and_the_refusals(store: str) -> None:
    sid = await rich_session(store)
    console = acting(store)
    async with browsing(console) as client:
        _, csrf = await page_and_csrf(client, sid)
        await client.post(f"/sessions/{sid}/steer", data={"csrf": csrf, "text": "  "})
        await client.post(f"/sessions/{sid}/steer", data={"csrf": csrf, "text": "Focus on errors."})
        await client.post(f"/sessions/{sid}/stop", data={"csrf": csrf})
        foreign = await client.post(
            f"/sessions/{sid}/steer",
            data={"csrf": csrf, "text": "from elsewhere"},
            headers={"origin": "http://evil.example"},
        )
        assert foreign.status_code == 403
        page = (await client.get(f"/sessions/{sid}")).text
        assert "nothing to steer with" in page and "stop requested" in page
        resumed = await client.post(f"/sessions/{sid}/resume", data={"csrf": csrf})
        assert resumed.status_code == 303
        await console.wait_idle()
        assert "nothing to resume: no turn" in (await client.get(f"/sessions/{sid}")).text
    payloads = [e.payload for e in await entries_of(store, sid)]
    assert [p.text for p in payloads if isinstance(p, Steer)] == [
        "Be brief, please.",
        "Focus on errors.",
    ]
    assert [p.reason for p in payloads if isinstance(p, StopRequest)] == [
        "stopped from the console"
    ]


async def test_a_read_only_console_refuses_every_change(store: str) -> None:
    sid = await parked_session(store)
    async with browsing(reading(store)) as client:
        page = (await client.get(f"/sessions/{sid}")).text
        assert 'name="csrf"' not in page
        for action in ("decide", "resume", "steer", "stop", "fork"):
            answer = await client.post(f"/sessions/{sid}/{action}", data={"text": "x"})
            assert answer.status_code == 403
            assert "started without --app" in answer.text
    kinds = [e.kind for e in await entries_of(store, sid)]
    assert "approval_decision" not in kinds and "steer" not in kinds


@requires_postgres
async def test_on_postgresql_pages_live_updates_and_approval(pg_schema: str) -> None:  # noqa: F811
    def store() -> PostgresStore:
        return PostgresBackend(PG_DSN, schema=pg_schema, max_size=2).store

    sid = await parked_session(store())
    runtime = Runtime(store=store(), agents=[gifts_agent(ScriptedModel([reply("Sent.")]))])
    console = Console.acting(runtime, token=TOKEN, poll_interval=0.02)
    async with browsing(console) as client:
        page, csrf = await page_and_csrf(client, sid)
        assert pre(page, "arguments") == [json.dumps(GIFT_ARGS, indent=2, sort_keys=True)]
        live = html.unescape(re.search(r'data-live="([^"]+)"', page).group(1))  # type: ignore[union-attr]
        waiting = asyncio.create_task(client.get(live))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        hash_ = re.search(r'name="hash" value="([0-9a-f]+)"', page).group(1)  # type: ignore[union-attr]
        form = {"csrf": csrf, "call_id": "call_1", "hash": hash_, "verdict": "approve"}
        await client.post(f"/sessions/{sid}/decide", data=form)
        assert "event: changed" in (await asyncio.wait_for(waiting, 5)).text
        await console.wait_idle()
        assert 'data-status="completed"' in (await client.get(f"/sessions/{sid}")).text


async def test_a_turn_decided_elsewhere_resumes_from_the_button(store: str) -> None:
    sid = await parked_session(store)
    async with Runtime(store=store) as runtime:
        session = await runtime.open_session(sid, gifts_agent(ScriptedModel([])))
        await session.approve("call_1", note="decided in a shell")
    console = acting(store, reply("Sent."))
    async with browsing(console) as client:
        page, csrf = await page_and_csrf(client, sid)
        assert 'class="verdict approved"' in page and 'class="resume"' in page
        assert 'class="decide"' not in page
        await client.post(f"/sessions/{sid}/resume", data={"csrf": csrf})
        await console.wait_idle()
        page = (await client.get(f"/sessions/{sid}")).text
    assert 'data-status="completed"' in page and 'class="resume"' not in page


async def test_a_resume_needs_the_sessions_agent_in_the_app(store: str) -> None:
    sid = await parked_session(store)
    console = Console.acting(Runtime(store=store), token=TOKEN)  # an app without `gifts`
    async with browsing(console) as client:
        page, csrf = await page_and_csrf(client, sid)
        hash_ = re.search(r'name="hash" value="([0-9a-f]+)"', page).group(1)  # type: ignore[union-attr]
        form = {"csrf": csrf, "call_id": "call_1", "hash": hash_, "verdict": "approve"}
        await client.post(f"/sessions/{sid}/decide", data=form)
        await console.wait_idle()
        page = (await client.get(f"/sessions/{sid}")).text
    assert "resume failed: ConfigurationError" in page and "no agent named" in page
    assert 'class="verdict approved"' in page and 'data-status="awaiting_approval"' in page


async def test_deferred_items_land_where_they_were_pushed(store: str) -> None:
    sid = await rich_session(store)
    async with Runtime(store=store) as runtime:
        item = DeferredItem.context("the <late> answer")
        await runtime.push_deferred(sid, Entry.of(DeferredEntry("d1", item)))
    async with browsing(reading(store)) as client:
        page = (await client.get(f"/sessions/{sid}")).text
        # Ids the page never showed (or that do not exist) are no error for the stream.
        stream = await client.get("/live?watch=no-such-session,x&since=old")
    mark = re.search(
        r'<li class="mark mark-deferred[^"]*" id="e(\d+)-deferred">(.*?)</li>', page, re.S
    )
    assert mark is not None and "the &lt;late&gt; answer" in mark.group(2)
    assert int(mark.group(1)) == 9  # after the run's end, where it was pushed
    assert "event: changed" in stream.text


async def test_fork_here_copies_the_history_and_opens_the_fork(store: str) -> None:
    sid = await parked_session(store)
    console = acting(store)
    async with browsing(console) as client:
        page, csrf = await page_and_csrf(client, sid)
        positions = [int(p) for p in re.findall(r'name="at" value="(\d+)"', page)]
        assert positions, "every message offers a fork"
        at = positions[-1]  # the assistant turn parked for approval
        refused = await client.post(f"/sessions/{sid}/fork", data={"at": str(at)})
        assert refused.status_code == 403
        foreign = await client.post(
            f"/sessions/{sid}/fork",
            data={"csrf": csrf, "at": str(at)},
            headers={"origin": "http://evil.example"},
        )
        assert foreign.status_code == 403
        bad = await client.post(f"/sessions/{sid}/fork", data={"csrf": csrf, "at": "x"})
        assert bad.headers["location"] == f"/sessions/{sid}#actions"
        assert "not an entry position" in (await client.get(f"/sessions/{sid}")).text
        done = await client.post(f"/sessions/{sid}/fork", data={"csrf": csrf, "at": str(at)})
        assert done.status_code == 303
        fork_id = re.fullmatch(r"/sessions/(\w+)#actions", done.headers["location"]).group(1)  # type: ignore[union-attr]
        assert fork_id != sid
        fork_page = (await client.get(f"/sessions/{fork_id}")).text
    assert f"forked from {sid} at entry #{at}" in fork_page
    assert 'class="forked-from"' in fork_page and "Nothing awaits a decision." in fork_page
    original, forked = await entries_of(store, sid), await entries_of(store, fork_id)
    assert [(e.kind, dict(e.data)) for e in forked[:at]] == [
        (e.kind, dict(e.data)) for e in original[:at]
    ]
    assert [e.kind for e in forked[at:]] == ["fork_link"]  # nothing made up, the link


async def test_a_run_under_a_tree_budget_shows_what_it_left(store: str) -> None:
    model = ScriptedModel([reply("ok", usage=Usage(40, 10))])
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(Agent("spender", model))
        budget = Budget(tokens=5000, usd=1.0, prices={"scripted": Price(input=1, output=4)})
        await session.run("hi", options=RunOptions(budget=budget))
    async with browsing(reading(store)) as client:
        page = (await client.get(f"/sessions/{session.id}")).text
    # 50 tokens used; $0.00004 + $0.00004 spent of $1.
    assert (
        "run ended: completed · 1 rounds · 50 tokens · budget left: 4,950 tokens · $0.9999" in page
    )


async def test_a_childs_escalated_call_shows_at_the_root_and_is_decided_on_its_page(
    store: str,
) -> None:
    import test_escalation as esc

    esc.transfers.clear()
    treasurer = SubAgent(
        "treasurer", "Pays.", FunctionModel(esc.child), tools=[esc.transfer], on_approval="escalate"
    )
    lead = Agent("lead", FunctionModel(esc.lead), tools=[treasurer.tool()])
    async with Runtime(store=store) as runtime:
        root = await runtime.create_session(lead)
        await root.run("Pay the invoice.")
        [call] = await root.pending()
    console = Console.acting(Runtime(store=store, agents=[lead]), token=TOKEN, poll_interval=0.02)
    async with browsing(console) as client:
        page = (await client.get(f"/sessions/{root.id}")).text
        assert "Escalated by" in page and f'href="/sessions/{call.session_id}"' in page
        child_page, csrf = await page_and_csrf(client, call.session_id)
        hash_ = re.search(r'name="hash" value="([0-9a-f]+)"', child_page).group(1)  # type: ignore[union-attr]
        form = {"csrf": csrf, "call_id": call.id, "hash": hash_, "verdict": "approve"}
        done = await client.post(f"/sessions/{call.session_id}/decide", data=form)
        assert done.status_code == 303
        await console.wait_idle()
        await console.runtime.background.wait_kept()  # the child goes on in a task
        child_page = (await client.get(f"/sessions/{call.session_id}")).text
        assert f"approved {call.id}; it goes on" in child_page
        root_page = (await client.get(f"/sessions/{root.id}")).text
    assert esc.transfers == [70]  # run once, by the decision
    assert "Escalated by" not in root_page


async def test_a_deleted_escalating_child_leaves_its_roots_page_readable(store: str) -> None:
    import test_escalation as esc

    treasurer = SubAgent(
        "treasurer", "Pays.", FunctionModel(esc.child), tools=[esc.transfer], on_approval="escalate"
    )
    lead = Agent("lead", FunctionModel(esc.lead), tools=[treasurer.tool()])
    async with Runtime(store=store) as runtime:
        root = await runtime.create_session(lead)
        await root.run("Pay the invoice.")
        [call] = await root.pending()
        await runtime.store.delete(call.session_id)
    async with browsing(reading(store)) as client:
        page = await client.get(f"/sessions/{root.id}")
    assert page.status_code == 200 and "Escalated by" not in page.text


async def test_a_question_an_mcp_task_asked_is_answered_from_its_form(store: str) -> None:
    from taskloom.entries import InputAnswer, InputRequest
    from taskloom.log import input_id_for

    asked = {
        "method": "elicitation/create",
        "params": {
            "message": "How many <copies>?",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "count": {"type": "integer", "title": "Copies"},
                    "colour": {"type": "string", "enum": ["red", "blue"]},
                    "urgent": {"type": "boolean"},
                },
                "required": ["count"],
            },
        },
    }
    sneaky = {
        "method": "elicitation/create",
        "params": {"mode": "url", "message": "Visit", "url": "javascript:alert(1)"},
    }
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(Agent("a", ScriptedModel([reply("ok")])))
        for activity, request in (("act-1", asked), ("act-2", sneaky)):
            question = InputRequest(input_id_for(activity, "k"), activity, "k", request, "srv", 1.0)
            await runtime.store.append(session.id, Entry.of(question))
    sid = session.id
    first = input_id_for("act-1", "k")
    console = acting(store)
    async with browsing(console) as client:
        page, csrf = await page_and_csrf(client, sid)
        assert "How many &lt;copies&gt;?" in page and 'name="f:count"' in page
        assert '<option value="blue">' in page and 'href="javascript:' not in page
        bad = {"csrf": csrf, "input_id": first, "action": "accept", "f:count": "many"}
        await client.post(f"/sessions/{sid}/answer", data=bad)
        page = (await client.get(f"/sessions/{sid}")).text
        assert "takes integer values" in page  # told, nothing written
        good = {**bad, "f:count": "3", "f:colour": "blue", "f:urgent": "on"}
        assert (await client.post(f"/sessions/{sid}/answer", data=good)).status_code == 303
        page = (await client.get(f"/sessions/{sid}")).text
    assert f"answered {first}" in page
    answers = [
        e.payload for e in await entries_of(store, sid) if isinstance(e.payload, InputAnswer)
    ]
    assert [(a.action, a.content) for a in answers] == [
        ("accept", {"count": 3, "colour": "blue", "urgent": True})
    ]


async def test_a_function_model_is_labelled_as_one(store: str) -> None:
    async with Runtime(store=store) as runtime:
        agent = Agent("echo", FunctionModel(lambda request: "hi", name="echoer"))
        session = await runtime.create_session(agent)
        await session.run("hello")
    async with browsing(reading(store)) as client:
        listing = (await client.get("/")).text
        page = (await client.get(f"/sessions/{session.id}")).text
    for shown in (listing, page):
        assert "function:echoer" in shown and "scripted:echoer" not in shown


async def test_a_child_moved_to_the_background_is_labelled_so(store: str) -> None:
    sid = await moved_session(store)
    async with browsing(reading(store)) as client:
        page = (await client.get(f"/sessions/{sid}")).text
    assert re.findall(r'<span class="mode-tag">([^<]*)</span>', page) == ["moved to background"]
    assert "child helper (moved to background)</a>" in page  # under the call
    # The transcript keeps the order of things: delegated inline, then moved.
    marks = re.findall(r"(delegated to helper \(\w+\)|child moved to the background)", page)
    assert marks == ["delegated to helper (inline)", "child moved to the background"]
