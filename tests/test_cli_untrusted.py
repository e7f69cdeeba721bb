"""The `taskloom` command treats what the store holds as data, never as code
or terminal control: a hostile session log can neither import a module nor
drive the terminal, and a human deciding an approval sees every argument."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console

import cli_tools
from cli_process import taskloom_cli
from taskloom import Agent, Runtime
from taskloom.cli.render import EventPrinter
from taskloom.events import (
    ApprovalRequested,
    ModelRequestStarted,
    NoticeDelivered,
    RetryAttempt,
    SubagentFinished,
    SubagentStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolProgress,
)
from taskloom.models import ScriptedModel, reply
from taskloom.testing.fake_server import FakeServer

ESCAPES = "\x1b[2J\x1b]0;pwned\x07"
"""Clear the screen, then retitle the terminal window."""

EVILMOD = """\
from pathlib import Path
Path(__file__).with_name("IMPORTED").write_text("evilmod ran")
def x(): return "x"
"""

PAYMENT = {
    "memo": "Quarterly settlement for the supplier, invoices 2291 to 2317, "
    "as agreed with procurement in the March review meeting",
    "amount": 98_000.0,
    "currency": "EUR",
    "destination": "IBAN DE89 3704 0044 0532 0130 00 (Mallory Holdings Ltd, Nassau)",
}
# Past any one-line fold: the amount and destination start after 100 characters.
assert len(str(PAYMENT["memo"])) > 100


@dataclass
class Hostile:
    """A store and a working directory as an attacker could leave them."""

    home: Path
    cwd: Path
    url: str
    payment_session: str
    payment_call: str
    escapes_session: str

    @property
    def marker(self) -> Path:
        return self.cwd / "IMPORTED"

    def cli(self, *args: str) -> tuple[int, str, str]:
        done = taskloom_cli(*args, home=self.home, cwd=self.cwd)
        return done.returncode, done.stdout, done.stderr


@pytest.fixture
async def hostile(tmp_path: Path) -> Hostile:
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    (cwd / "evilmod.py").write_text(EVILMOD)
    url = f"sqlite:///{home / 'taskloom.db'}"
    stored_names = {"model": "openai:gpt-4.1-mini", "tools": ["evilmod:x"], "system": "hi"}
    async with Runtime(store=url) as runtime:
        payer = Agent(
            "cli",
            ScriptedModel([reply("Paying.", tool_calls=[("pay", PAYMENT)])]),
            tools=[cli_tools.pay],
        )
        session = await runtime.create_session(payer, metadata=stored_names)
        parked = await session.run("Settle the supplier invoices.")
        assert parked.pending, parked.status

        model = ScriptedModel(
            [
                reply(f"text {ESCAPES}", tool_calls=[("echo", {"text": ESCAPES})]),
                reply(f"done {ESCAPES}"),
            ]
        )
        evil = Agent(f"agent{ESCAPES}", model, tools=[cli_tools.echo])
        loud = await runtime.create_session(evil, metadata=stored_names)
        await loud.run(f"user {ESCAPES}")
        await runtime.create_session(
            Agent("child", model),
            parent_id=loud.id,
            metadata={"name": f"worker{ESCAPES}", "task": f"task{ESCAPES}", "mode": ESCAPES},
        )
    return Hostile(home, cwd, url, session.id, parked.pending[0].id, loud.id)


@pytest.fixture
def server() -> FakeServer:
    with FakeServer.in_thread() as s:
        yield s  # type: ignore[misc]


def _unwrapped(text: str) -> str:
    """The output with line breaks and indentation gone: wrapping is allowed,
    losing characters is not."""
    return "".join(text.split())


def _assert_full_payment(out: str) -> None:
    flat = _unwrapped(out)
    for value in PAYMENT.values():
        assert _unwrapped(str(value)) in flat, (value, out)
    assert "…" not in out and "..." not in out, out


# ---------------------------------------------------------------- no imports


def test_reading_and_deciding_import_nothing_the_store_names(hostile: Hostile) -> None:
    sid = hostile.payment_session
    for args in (
        ("sessions", "list"),
        ("sessions", "show", sid),
        ("sessions", "show", sid, "--tree"),
        ("approve", sid, hostile.payment_call),
    ):
        code, _out, err = hostile.cli(*args)
        assert code == 0, (args, err)
        assert not hostile.marker.exists(), f"{args} imported evilmod.py"


def test_resume_without_an_agent_on_the_command_line_says_how_to_give_one(
    hostile: Hostile,
) -> None:
    hostile.cli("approve", hostile.payment_session, hostile.payment_call)
    code, out, err = hostile.cli("resume", hostile.payment_session)
    assert code == 2, (out, err)
    assert not hostile.marker.exists()
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in err, err
    assert "--app" in lines[1] and "--model" in lines[1], err


def test_resume_with_model_and_tools_from_the_command_line(
    hostile: Hostile, server: FakeServer
) -> None:
    server.script(FakeServer.reply("Paid."))
    hostile.cli("approve", hostile.payment_session, hostile.payment_call)
    code, out, err = hostile.cli(
        "resume",
        hostile.payment_session,
        "--model",
        f"openai:gpt-4.1-mini@{server.base_url}",
        "--tool",
        "cli_tools:pay",
    )
    assert code == 0, err
    assert "paid 98000.00 EUR" in out and "Paid." in out
    assert not hostile.marker.exists()
    assert [t["function"]["name"] for t in server.requests[0].body["tools"]] == ["pay"]


def test_run_in_an_existing_session_takes_its_agent_from_the_command_line(
    hostile: Hostile, server: FakeServer
) -> None:
    sid = hostile.escapes_session
    code, out, err = hostile.cli("run", "And again?", "--session", sid)
    assert code == 2 and "--model" in err and not server.requests, err
    server.script(FakeServer.reply("Once more."))
    model = f"openai:gpt-4.1-mini@{server.base_url}"
    code, out, err = hostile.cli("run", "And again?", "--session", sid, "--model", model)
    assert code == 0, err
    assert "Once more." in out
    sent = server.requests[0].body["messages"]
    # Instructions are data, like the transcript: the recorded ones stay.
    assert sent[0] == {"role": "system", "content": "hi"}
    assert sent[1]["content"] == f"user {ESCAPES}" and sent[-1]["content"] == "And again?"
    assert not hostile.marker.exists()


APP = """\
from taskloom import Agent, Runtime
import cli_tools

def make():
    agents = {{"cli": Agent("cli", "openai:gpt-4.1-mini@{base_url}", tools=[cli_tools.pay])}}
    runtime = Runtime(store={url!r})
    runtime.agents = agents if {has_agent} else {{}}
    return runtime

not_a_factory = 42
"""


def _write_app(hostile: Hostile, server: FakeServer, has_agent: bool = True) -> None:
    app = APP.format(base_url=server.base_url, url=hostile.url, has_agent=has_agent)
    (hostile.cwd / "myapp.py").write_text(app)


def test_resume_with_the_apps_agent(hostile: Hostile, server: FakeServer) -> None:
    server.script(FakeServer.reply("Paid through the app."))
    _write_app(hostile, server)
    hostile.cli("approve", hostile.payment_session, hostile.payment_call)
    code, out, err = hostile.cli("resume", hostile.payment_session, "--app", "myapp:make")
    assert code == 0, err
    assert "paid 98000.00 EUR" in out and "Paid through the app." in out
    assert not hostile.marker.exists()


def test_an_app_without_the_sessions_agent_names_it(hostile: Hostile, server: FakeServer) -> None:
    _write_app(hostile, server, has_agent=False)
    hostile.cli("approve", hostile.payment_session, hostile.payment_call)
    code, _out, err = hostile.cli("resume", hostile.payment_session, "--app", "myapp:make")
    assert code == 2 and "Traceback" not in err, err
    error, hint = err.strip().splitlines()
    assert "'cli'" in error and "myapp:make" in error, err
    assert "agents" in hint, err
    assert not server.requests


@pytest.mark.parametrize(
    ("ref", "named"),
    [
        ("nosuchmodule:make", "nosuchmodule"),
        ("myapp:missing", "missing"),
        ("myapp", "module:factory"),
        ("myapp:not_a_factory", "not_a_factory"),
    ],
)
def test_a_bad_app_is_one_line_and_a_hint(
    hostile: Hostile, server: FakeServer, ref: str, named: str
) -> None:
    _write_app(hostile, server)
    code, _out, err = hostile.cli("resume", hostile.payment_session, "--app", ref)
    assert code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("taskloom: ") and named in lines[0], err
    assert lines[1].lstrip().startswith("hint: "), err


# ---------------------------------------------------------------- approvals in full


def test_show_and_approve_print_every_argument(hostile: Hostile) -> None:
    code, out, err = hostile.cli("sessions", "show", hostile.payment_session)
    assert code == 0, err
    parked = out[out.index("awaiting approval") :]
    _assert_full_payment(parked)
    assert '"amount": 98000.0' in parked  # pretty-printed JSON, one key a line

    code, out, err = hostile.cli("approve", hostile.payment_session, hostile.payment_call)
    assert code == 0, err
    _assert_full_payment(out)
    code, out, err = hostile.cli("sessions", "show", hostile.payment_session)
    _assert_full_payment(out[out.index("approved, awaiting resume") :])


def test_run_that_parks_prints_every_argument(server: FakeServer, tmp_path: Path) -> None:
    server.script(FakeServer.reply(tool_calls=[("pay", PAYMENT)]))
    done = taskloom_cli(
        "run",
        "Settle the invoices.",
        "--model",
        f"openai:gpt-4.1-mini@{server.base_url}",
        "--tool",
        "cli_tools:pay",
        home=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    _assert_full_payment(done.stdout[done.stdout.index("awaiting approval") :])


def test_long_arguments_wrap_at_the_terminal_width() -> None:
    from taskloom.cli.render import approval_block

    long = "acct-" + "0123456789" * 30
    out = io.StringIO()
    Console(file=out, width=60).print(approval_block("pay", "call_1", {"destination": long}))
    assert max(len(line) for line in out.getvalue().splitlines()) <= 60
    assert long in _unwrapped(out.getvalue())


# ---------------------------------------------------------------- terminal control


_RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_store_text_cannot_drive_the_terminal(hostile: Hostile) -> None:
    sid = hostile.escapes_session
    for args in (
        ("sessions", "list"),
        ("sessions", "show", sid),
        ("sessions", "show", sid, "--tree"),
    ):
        code, out, err = hostile.cli(*args)
        assert code == 0, err
        assert not _RAW_CONTROL.search(out), (args, out)
        assert "\\x1b[2J\\x1b]0;pwned\\x07" in out, (args, out)


def test_event_printer_shows_control_characters_escaped() -> None:
    out = io.StringIO()
    printer = EventPrinter(Console(file=out, width=200))
    o = f"lane{ESCAPES}"
    for event in (
        ModelRequestStarted(run_id="r", round=1, model=f"m{ESCAPES}", origin=o),
        TextDelta(text=f"hello {ESCAPES}\n", origin=o),
        ToolCallStarted(call_id=f"c{ESCAPES}", name=f"t{ESCAPES}", arguments={"a": ESCAPES}),
        ToolProgress(call_id="c", message=ESCAPES),
        ToolCallFinished(call_id=f"c{ESCAPES}", name=f"t{ESCAPES}", content=ESCAPES),
        ApprovalRequested(call_id=f"c{ESCAPES}", name=f"t{ESCAPES}", arguments={ESCAPES: ESCAPES}),
        NoticeDelivered(text=ESCAPES),
        RetryAttempt(attempt=1, delay=0.1, error=ESCAPES),
        SubagentStarted(child_session_id="x", name=ESCAPES, task=ESCAPES, mode=ESCAPES),
        SubagentFinished(child_session_id="x", name=ESCAPES, status=ESCAPES),
    ):
        printer(event)
    text = out.getvalue()
    assert not _RAW_CONTROL.search(text), text
    assert text.count("\\x1b[2J\\x1b]0;pwned\\x07") >= 10, text


def test_visible_escapes_c0_c1_and_del_but_keeps_lines_and_tabs() -> None:
    from taskloom.cli.render import visible

    assert visible("a\nb\tc") == "a\nb\tc"
    assert visible("\x00\x1b\x7f\x85\x9b\r") == "\\x00\\x1b\\x7f\\x85\\x9b\\x0d"
    assert visible("ok ✓ é") == "ok ✓ é"
