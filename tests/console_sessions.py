"""Sessions the console tests look at, built with scripted models on a real store,
and the `--app` factory the console server process acts through."""

from __future__ import annotations

import asyncio
import os

import taskloom
from taskloom import Agent, RunStatus, Runtime, ToolEffect
from taskloom.backends import SessionStore
from taskloom.delegation import SubAgent
from taskloom.loop.ports import RUN_BY
from taskloom.models import FunctionModel, ModelRequest, Reply, ScriptedModel, reply

XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
GIFT_ARGS = {"to": "Ada <Lovelace>", "total": 900, "wrapping": "gold & blue"}
LONG_OUTPUT = "\n".join(f"line {n}: {'x' * 40}" for n in range(60))


@taskloom.tool(needs_approval=True)
async def send_gift(to: str, total: float, wrapping: str) -> str:
    """Send a gift (needs approval)."""
    return f"sent {to} a gift worth {total} in {wrapping} paper"


@taskloom.tool(effect=ToolEffect.READ_ONLY)
async def echo(text: str) -> str:
    """Say the text back."""
    return text


@taskloom.tool(effect=ToolEffect.READ_ONLY)
async def dump_log() -> str:
    """A long output."""
    return LONG_OUTPUT


def gifts_agent(model: ScriptedModel) -> Agent:
    return Agent(name="gifts", model=model, tools=[send_gift])


async def parked_session(store: str | SessionStore) -> str:
    """A session parked on one approval of `send_gift` with GIFT_ARGS."""
    async with Runtime(store=store) as runtime:
        model = ScriptedModel([reply("Let me send it.", tool_calls=[("send_gift", GIFT_ARGS)])])
        session = await runtime.create_session(gifts_agent(model))
        result = await session.run("Send Ada something nice.")
        assert result.status is RunStatus.AWAITING_APPROVAL
        return session.id


async def fan_out_session(store: str | SessionStore) -> str:
    """A parent that delegated three tasks at once to a `researcher` subagent;
    each child answers after a short delay, so the three overlap in time."""
    async with Runtime(store=store) as runtime:
        child_model = ScriptedModel([reply(f"fact {n}", delay=0.15) for n in range(3)])
        researcher = SubAgent("researcher", "Finds facts.", child_model)
        calls = [
            ("researcher", {"task": f"find fact {n}", "name": f"r{n}"}, f"call_r{n}")
            for n in range(3)
        ]
        parent_model = ScriptedModel([reply(tool_calls=calls), reply("Three facts found.")])
        session = await runtime.create_session(
            Agent(name="lead", model=parent_model, tools=[researcher.tool()])
        )
        result = await session.run("Find three facts.")
        assert result.status is RunStatus.COMPLETED, result
        return session.id


async def moved_session(store: str | SessionStore) -> str:
    """A parent whose `helper` child outlasted `background_after`: its call
    answered "still running", and the child ended later in the background."""
    gate = asyncio.Event()

    async def slow(request: ModelRequest) -> Reply:
        await gate.wait()
        return reply("forty-two")

    def lead(request: ModelRequest) -> Reply:
        if any(m.role == "tool" for m in request.messages):
            return reply("waiting for the helper")
        return reply(tool_calls=[("helper", {"task": "think hard"})])

    helper = SubAgent("helper", "Helps.", FunctionModel(slow), background_after=0.05)
    async with Runtime(store=store) as runtime:
        agent = Agent("lead", FunctionModel(lead), tools=[helper.tool()])
        session = await runtime.create_session(agent)
        assert (await session.run("go")).text == "waiting for the helper"
        gate.set()
        async with asyncio.timeout(10):
            while not await runtime.background.inbox.pending(session.id):
                await asyncio.sleep(0.01)
        return session.id


async def worker_session(store: str | SessionStore) -> str:
    """A session run as a queue worker runs it: naming itself (`RUN_BY`)."""
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(Agent("bot", ScriptedModel([reply("done")])))
        token = RUN_BY.set("worker 7, job 42 (box, pid 99)")
        try:
            await session.run("hi")
        finally:
            RUN_BY.reset(token)
        return session.id


async def xss_session(store: str | SessionStore) -> str:
    """A transcript carrying markup everywhere text can come from: the user,
    the model (text, reasoning, call arguments) and a tool's result."""
    async with Runtime(store=store) as runtime:
        model = ScriptedModel(
            [
                reply(thinking=XSS, tool_calls=[("echo", {"text": XSS})]),
                reply(XSS),
            ]
        )
        session = await runtime.create_session(Agent(name=XSS, model=model, tools=[echo]))
        await session.run(XSS)
        return session.id


async def rich_session(store: str | SessionStore) -> str:
    """Reasoning, a long tool output, steering folded in, and a finished run."""
    async with Runtime(store=store) as runtime:
        model = ScriptedModel(
            [
                reply(thinking="I should look at the log.", tool_calls=[("dump_log", {})]),
                reply("The log has 60 lines."),
            ]
        )
        session = await runtime.create_session(Agent(name="reader", model=model, tools=[dump_log]))
        await session.steer("Be brief, please.")
        await session.run("What is in the log?")
        return session.id


def make_runtime() -> Runtime:
    """The `--app` factory of the browser tests: the store named by
    $CONSOLE_TEST_STORE, with a `gifts` agent whose model answers once the
    parked call has run (slowly, so the page is seen while it runs)."""
    model = ScriptedModel([reply("Sent. Ada will love it.", delay=1.0)])
    return Runtime(store=os.environ["CONSOLE_TEST_STORE"], agents=[gifts_agent(model)])


async def showcase_session(store: str | SessionStore) -> str:
    """What the README's picture shows: three researchers at once, then a gift
    that waits for approval."""
    async with Runtime(store=store) as runtime:
        child_model = ScriptedModel([reply(f"fact {n}", delay=0.2 + 0.1 * n) for n in range(3)])
        researcher = SubAgent("researcher", "Finds facts.", child_model)
        calls = [
            (
                "researcher",
                {"task": f"find what Ada likes, angle {n}", "name": f"r{n}"},
                f"call_r{n}",
            )
            for n in range(3)
        ]
        model = ScriptedModel(
            [
                reply(thinking="Three angles, in parallel.", tool_calls=calls),
                reply("She likes engines.", tool_calls=[("send_gift", GIFT_ARGS, "call_gift")]),
            ]
        )
        session = await runtime.create_session(
            Agent(name="concierge", model=model, tools=[researcher.tool(), send_gift])
        )
        result = await session.run("Find out what Ada likes and send her a gift.")
        assert result.status is RunStatus.AWAITING_APPROVAL
        return session.id
