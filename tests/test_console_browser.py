"""The console in a real browser: Playwright driving Debian's Chromium against
`taskloom serve` run as a process on a free loopback port.

Chromium comes from the system (`.ci/run` installs Debian's `chromium` when it
is missing); Playwright never downloads a browser. Without one these tests
skip, except under CI, where they must run.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from console_server import Served, serving
from console_sessions import (
    GIFT_ARGS,
    XSS,
    fan_out_session,
    moved_session,
    parked_session,
    rich_session,
    showcase_session,
    worker_session,
    xss_session,
)

pytestmark = pytest.mark.slow

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = os.environ.get("TASKLOOM_CHROMIUM") or shutil.which("chromium")
SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "console.png"

if CHROMIUM is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI needs Chromium for the console tests: apt-get install chromium")
    pytest.skip("no chromium on PATH (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'console.db'}"


def build(make: Callable[[str], Coroutine[Any, Any, str]], store: str) -> str:
    """Run a session builder on its own thread: Playwright's sync API keeps
    an event loop running on this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, make(store)).result()


def signed_in(browser: Any, served: Served, path: str) -> Any:
    """A fresh browser context that opened `path` with the token once."""
    page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
    page.set_default_timeout(15_000)
    page.goto(served.with_token(path))
    page.wait_for_url(f"{served.url}{path}")  # the token left the address bar
    return page


def test_the_sessions_list(browser: Any, store: str) -> None:
    parked = build(parked_session, store)
    rich = build(rich_session, store)
    with serving(store) as served:
        page = signed_in(browser, served, "/")
        rows = page.locator("table.sessions tbody tr")
        assert rows.count() == 2
        assert rows.nth(0).get_attribute("data-session") == rich
        assert rows.nth(1).locator(".status").inner_text() == "awaiting approval"
        assert rows.nth(1).locator(".pending-count").inner_text() == "1"
        page.select_option("select[name=status]", "awaiting_approval")
        page.click("form.filters button")
        page.wait_for_url("**/?status=awaiting_approval*")
        assert page.locator("table.sessions tbody tr").count() == 1
        page.click(f"a[href='/sessions/{parked}']")
        page.wait_for_selector(".pending-call")
        page.context.close()


def test_approve_and_watch_the_run_complete_live(browser: Any, store: str) -> None:
    sid = build(parked_session, store)
    with serving(store, "--app", "console_sessions:make_runtime") as served:
        page = signed_in(browser, served, f"/sessions/{sid}")
        call = page.locator(".pending-call")
        assert call.locator(".tool-name").inner_text() == "send_gift"
        assert call.locator("pre.arguments").inner_text() == json.dumps(
            GIFT_ARGS, indent=2, sort_keys=True
        )
        call.locator("input[name=note]").fill("within budget")
        call.locator("button.approve").click()
        page.wait_for_url(f"**/sessions/{sid}#actions")
        assert "approved call_1; resuming" in page.locator("#actions").inner_text()
        # The model answers a second after the resume starts: this page was
        # drawn before the run ended, and is not reloaded from here on.
        assert page.get_attribute("#status", "data-status") in ("awaiting_approval", "running")
        page.evaluate("window.__same_page = true")
        page.wait_for_selector('#status[data-status="completed"]')
        assert page.evaluate("window.__same_page") is True
        transcript = page.locator("#transcript").inner_text()
        assert "Sent. Ada will love it." in transcript
        assert "sent Ada <Lovelace> a gift worth 900" in transcript
        assert page.locator(".pending-call").count() == 0
        page.context.close()


def test_the_delegation_tree_of_a_three_child_fan_out(browser: Any, store: str) -> None:
    sid = build(fan_out_session, store)
    with serving(store) as served:
        page = signed_in(browser, served, f"/sessions/{sid}")
        groups = page.locator("#tree .call-group")
        assert groups.count() == 3
        for n in range(3):
            group = groups.nth(n)
            assert f"call_r{n}" in group.locator(".call-label").inner_text()
            child = group.locator(".node")
            assert child.count() == 1
            assert child.locator(".status").inner_text() == "done"
            assert child.locator(".origin").inner_text().startswith(f"r{n}#")
        groups.nth(1).locator("a.node-name").click()
        page.wait_for_selector("#transcript")
        assert "fact" in page.locator("#transcript").inner_text()
        assert page.locator("dl.facts").inner_text().count("Parent") == 1
        page.context.close()


def test_the_timeline_shows_three_parallel_bars(browser: Any, store: str) -> None:
    sid = build(fan_out_session, store)
    with serving(store) as served:
        page = signed_in(browser, served, f"/sessions/{sid}")
        bars = page.locator("svg.timeline rect.bar-tool")
        assert bars.count() == 3
        boxes = [bars.nth(i).bounding_box() for i in range(3)]
        assert len({round(b["y"]) for b in boxes}) == 3  # each in a lane of its own
        assert max(b["x"] for b in boxes) < min(b["x"] + b["width"] for b in boxes)  # side by side
        page.context.close()


def test_a_transcript_with_markup_renders_inert(browser: Any, store: str) -> None:
    sid = build(xss_session, store)
    with serving(store) as served:
        page = signed_in(browser, served, f"/sessions/{sid}")
        page.wait_for_selector("#transcript")
        assert page.evaluate("typeof window.__xss") == "undefined"
        assert page.locator("img").count() == 0
        assert page.locator("#transcript").inner_text().count(XSS) >= 3
        page.goto(f"{served.url}/")
        assert page.evaluate("typeof window.__xss") == "undefined"
        page.context.close()


def test_without_the_token_every_page_answers_401(browser: Any, store: str) -> None:
    sid = build(parked_session, store)
    with serving(store, "--app", "console_sessions:make_runtime") as served:
        context = browser.new_context()
        page = context.new_page()
        for path in (
            "/",
            f"/sessions/{sid}",
            f"/sessions/{sid}/live",
            "/live",
            "/static/console.css",
            "/sessions/unknown",
        ):
            answer = page.goto(f"{served.url}{path}")
            assert answer is not None and answer.status == 401, path
            assert "Send Ada" not in page.content()
        for action in ("decide", "resume", "steer", "stop"):
            posted = context.request.post(f"{served.url}/sessions/{sid}/{action}", form={"x": "1"})
            assert posted.status == 401, action
        assert page.goto(f"{served.url}/?token=wrong").status == 401  # type: ignore[union-attr]
        context.close()


def test_a_child_moved_to_the_background_reads_so_in_the_tree(browser: Any, store: str) -> None:
    sid = build(moved_session, store)
    with serving(store) as served:
        page = signed_in(browser, served, f"/sessions/{sid}")
        child = page.locator("#tree .call-group .node")
        assert child.count() == 1
        assert child.locator(".mode-tag").inner_text() == "moved to background"
        assert page.locator("a.child-link").inner_text() == "child helper (moved to background)"
        page.context.close()


def test_the_timeline_says_who_ran_the_run(browser: Any, store: str) -> None:
    sid = build(worker_session, store)
    with serving(store) as served:
        page = signed_in(browser, served, f"/sessions/{sid}")
        ran_by = page.locator("#timeline .ran-by")
        assert ran_by.inner_text() == "Run by worker 7, job 42 (box, pid 99)"
        assert ran_by.is_visible()
        page.context.close()


def test_a_token_link_redirects_to_the_page_itself(browser: Any, store: str) -> None:
    sid = build(parked_session, store)
    with serving(store) as served:
        page = browser.new_context().new_page()
        answer = page.goto(served.with_token(f"/sessions/{sid}"))
        assert answer is not None and answer.status == 200
        # Reached by a redirect, not by a page that goes on: what a headless
        # screenshot of the link captures is the session itself.
        first = answer.request.redirected_from
        assert first is not None and first.response().status == 303
        assert page.url == f"{served.url}/sessions/{sid}"
        assert "Send Ada something nice." in page.content()
        page.context.close()


def test_the_readme_screenshot(browser: Any, store: str, tmp_path: Path) -> None:
    """Takes the README's picture; `scripts/refresh-console-screenshot` writes
    it to docs/ (a test run alone leaves the checkout untouched)."""
    sid = build(showcase_session, store)
    with serving(store, "--app", "console_sessions:make_runtime") as served:
        page = signed_in(browser, served, f"/sessions/{sid}")
        page.wait_for_selector("svg.timeline")
        assert page.locator("svg.timeline rect.bar-tool").count() == 4
        target = (
            SCREENSHOT
            if os.environ.get("TASKLOOM_REFRESH_SCREENSHOT") == "1"
            else tmp_path / "console.png"
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        page.set_viewport_size({"width": 1200, "height": 1400})
        page.screenshot(path=str(target))
        assert target.stat().st_size > 20_000
        page.context.close()
