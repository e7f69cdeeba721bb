"""What the CLI's commands share (every name without an underscore): the
typed values a command line is parsed into (once, in `parse`), and how a
command gets its store, agent and code.

The code a command runs comes from its own command line, never from a
store. A session's log and metadata are data: a tampered store must not be
able to make `taskloom` import anything. Reading and deciding commands build
no agent: they work on `--store`, or on the store of the Runtime that
`--app` returns, and import nothing else. Acting commands (`resume`, `run
--session`) build the session's agent from `--app module:factory` — the
host's factory returning its `Runtime`, whose `agents` include the one the
session records — or from `--model` and `--tool` given on that same command
line.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import os
import shlex
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit

from .._redact import safe_url
from ..agent import Agent
from ..backends import SessionMeta, open_backend
from ..delegation import DecidedChildren
from ..errors import ConfigurationError, UsageError
from ..loop import Budget, RunOptions
from ..runtime import Runtime
from ..tools import Tool, as_tool
from . import default_store_url
from .failures import with_hint
from .text import visible

# ---------------------------------------------------------------- typed values


@dataclass(frozen=True, slots=True)
class Where:
    """The store a command works on: the one of `--app`'s Runtime, `--store`'s,
    or (neither given) the embedded default store."""

    store: str | None = None
    app: str | None = None

    def options(self) -> list[str]:
        """`--app` or `--store` (none for the default store), for a printed
        command: a password in the URL shown as `***`, a credential query
        parameter's value as `[redacted]` (the user types those in again)."""
        if self.app:
            return ["--app", self.app]
        return ["--store", shown_url(self.store)] if self.store else []

    def named(self) -> str:
        """The store, as a message names it (credentials hidden as `options` hides them)."""
        if self.app:
            return f"the store of --app {self.app}"
        if not self.store:
            return f"{default_store_url()} (the default store; --store names another)"
        return shown_url(self.store)


def shown_url(url: str) -> str:
    """`url` as a message or a printed command may show it: the user name
    kept, a password as `***`, each credential query parameter's value as
    `[redacted]` (`safe_url`, which leaves out the user-info entirely)."""
    try:
        info, at, _ = urlsplit(url).netloc.rpartition("@")
    except ValueError:  # not a URL urllib parses (a bad IPv6 host): no user-info kept
        return safe_url(url)
    if not at:
        return safe_url(url)
    name, colon, _ = info.partition(":")
    head, sep, rest = safe_url(url).partition("://")
    return f"{head}{sep}{name}{':***' if colon else ''}@{rest}"


_MODEL_FLAGS = ("tool", "system", "base_url", "api_key_env")


@dataclass(frozen=True, slots=True)
class AgentFlags:
    """How an acting command builds its agent without `--app`, and the run's limits."""

    model: str | None = None
    tool: tuple[str, ...] = ()
    system: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    max_rounds: int = 20
    budget_tokens: int | None = None
    budget_usd: float | None = None

    def model_options(self) -> dict[str, Any]:
        """The options of `--model` from `--base-url` and `--api-key-env`."""
        options = {"base_url": self.base_url, "api_key_env": self.api_key_env}
        return {name: value for name, value in options.items() if value}

    def run_options(self) -> RunOptions:
        """The run's limits from `--max-rounds`, `--budget-tokens` and `--budget-usd`."""
        budget = None
        if self.budget_tokens is not None or self.budget_usd is not None:
            budget = Budget(tokens=self.budget_tokens, usd=self.budget_usd)
        return RunOptions(max_rounds=self.max_rounds, budget=budget)


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """A parsed command line: its command, store and session (each command's
    own values in a subclass named after it)."""

    command: str
    where: Where = Where()
    session_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Demo(Command):
    fast: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Run(Command):
    """`taskloom run`: `agent` names the app's agent to run."""

    prompt: str
    agent: str | None
    flags: AgentFlags


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume(Command):
    session_id: str
    flags: AgentFlags


@dataclass(frozen=True, slots=True, kw_only=True)
class ListSessions(Command):
    limit: int
    json: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Show(Command):
    session_id: str
    tree: bool
    json: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Fork(Command):
    session_id: str
    at: int | None
    round: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Diff(Command):
    a: str
    b: str
    json: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Approve(Command):
    session_id: str
    call_id: str
    deny: bool
    note: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer(Command):
    """`taskloom answer`: `set` holds the NAME=VALUE fields, `json` the object."""

    session_id: str
    input_id: str
    set: tuple[str, ...]
    json: str | None
    decline: bool
    cancel: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Serve(Command):
    host: str
    port: int
    token: str | None
    max_body: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeAgent(Command):
    """`taskloom mcp serve` and `taskloom a2a serve` (`command` says which)."""

    agent: str
    http: str | None
    token_env: str
    max_body: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker(Command):
    """`taskloom worker`: on procrastinate, or on Temporal with `temporal` (its address)."""

    concurrency: int
    queues: str | None
    temporal: str | None = None
    namespace: str | None = None
    task_queue: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Database(Command):
    """`taskloom db migrate`."""

    url: str
    schema: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStatusArgs(Command):
    """`taskloom queue status`: of the procrastinate queue at `url`, or of the
    Temporal queue at `temporal` (its address) in `namespace` on `task_queue`."""

    url: str | None
    schema: str | None
    temporal: str | None = None
    namespace: str | None = None  # Temporal's: "default" unless given
    task_queue: str | None = None  # Temporal's: "taskloom" unless given


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryArgs(Command):
    """`taskloom memory list|show|search|namespaces` (`action` says which):
    `prefix` and `namespace` as written on the command line (parts joined
    by `/`), the rest as parsed."""

    action: str
    prefix: str = ""
    namespace: str = ""
    key: str = ""
    query: str = ""
    limit: int = 50
    offset: int = 0
    json: bool = False


# Each command's typed value, and the module and function that run it.
_COMMANDS: dict[str, tuple[type[Command], str, str]] = {
    "demo": (Demo, "demo", "run_demo"),
    "run": (Run, "run", "run_prompt"),
    "resume": (Resume, "sessions", "dispatch"),
    "list": (ListSessions, "sessions", "dispatch"),
    "show": (Show, "sessions", "dispatch"),
    "fork": (Fork, "sessions", "dispatch"),
    "diff": (Diff, "sessions", "dispatch"),
    "approve": (Approve, "sessions", "dispatch"),
    "answer": (Answer, "sessions", "dispatch"),
    "serve": (Serve, "serve", "serve_console"),
    "mcp": (ServeAgent, "protocols", "serve_agent"),
    "a2a": (ServeAgent, "protocols", "serve_agent"),
    "worker": (Worker, "worker", "run_worker"),
    "queue": (QueueStatusArgs, "queue", "queue_status"),
    "db": (Database, "db", "migrate"),
    "memory": (MemoryArgs, "memory", "memory_command"),
}


def parse(args: argparse.Namespace) -> Command:
    """The typed value of a parsed command line."""
    command: Command = _typed(_COMMANDS[_name(args)][0], args)
    return command


def runner(args: argparse.Namespace) -> Callable[[Any], int]:
    """The function that runs the command `args` parsed (its module imported now)."""
    _, module, name = _COMMANDS[_name(args)]
    run: Callable[[Any], int] = getattr(importlib.import_module(f".{module}", __package__), name)
    return run


def _name(args: argparse.Namespace) -> str:
    return str(args.action if args.command == "sessions" else args.command)


def _typed(kind: type[Any], args: argparse.Namespace) -> Any:
    values: dict[str, Any] = {}
    for f in fields(kind):
        if f.name == "where":
            values["where"] = Where(getattr(args, "store", None), getattr(args, "app", None))
        elif f.name == "flags":
            values["flags"] = _typed(AgentFlags, args)
        elif hasattr(args, f.name):
            value = getattr(args, f.name)
            values[f.name] = tuple(value) if isinstance(value, list) else value
    return kind(**values)


# ---------------------------------------------------------------- code and stores


def drain_on_signals(drain: Callable[[], None]) -> None:
    """Make SIGTERM and SIGINT drain a worker (`drain` is called once, in the
    running loop), and a second signal end the process at once with exit
    code 1, as a crash would: the queue's own recovery (the stall reaper, or
    Temporal's heartbeat timeout) hands its work to another worker."""
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals > 1:
            print("taskloom worker: second signal, exiting now", file=sys.stderr, flush=True)
            os._exit(1)
        print("taskloom worker: draining", file=sys.stderr, flush=True)
        drain()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)


def address(text: str) -> tuple[str, int]:
    """The (host, port) of `--http HOST:PORT`."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise with_hint(
            UsageError(f"--http takes HOST:PORT, got {text!r}"),
            "for example --http 127.0.0.1:8000 (port 0 picks a free one)",
        )
    return host, int(port)


def load_object(ref: str, flag: str, shape: str = "module:attribute") -> Any:
    """The attribute `module:attribute` names, given as `flag` (errors spell
    what it takes as `shape`). The working directory is searched last, so a
    host's own modules load with the console script as with `python -m`."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise with_hint(
            ConfigurationError(f"{flag} takes {shape}, got {visible(ref)!r}"),
            f"write {flag} package.module:name (a module on PYTHONPATH or in this folder)",
        )
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise  # the module exists but needs a package that is not installed
        raise with_hint(
            ConfigurationError(f"{flag} {ref}: no module named {exc.name!r}"),
            "run taskloom from the folder that holds it, or add that folder to PYTHONPATH",
        ) from exc
    except Exception as exc:
        raise with_hint(
            ConfigurationError(f"{flag} {ref}: importing {module_name!r} failed: {exc!r}"),
            "fix the module (--debug shows where it failed)",
        ) from exc
    except SystemExit as exc:
        # A script's exit at import would end taskloom without a word.
        raise with_hint(
            ConfigurationError(
                f"{flag} {ref}: importing {module_name!r} called exit({exc.code!r})"
            ),
            "a module taskloom loads must not exit when imported: "
            "put its script part under if __name__ == '__main__':",
        ) from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise with_hint(
            ConfigurationError(f"{flag} {ref}: module {module_name!r} has no attribute {attr!r}"),
            f"the part after ':' names an attribute of the module ({flag} {shape})",
        ) from None


def load_tool(ref: str) -> Tool:
    """A tool from `module:attribute` (a Tool or a plain function)."""
    obj = load_object(ref, "--tool")
    try:
        return as_tool(obj)
    except (TypeError, ValueError) as exc:
        raise with_hint(
            ConfigurationError(f"--tool {ref} is not a tool: {exc}"),
            "point --tool at a @taskloom.tool or a plain function (--tool module:attribute)",
        ) from exc


async def _made(factory: Any, what: str, returns: str) -> Any:
    try:
        made = factory()
        return (await made) if inspect.isawaitable(made) else made
    except Exception as exc:
        raise with_hint(
            ConfigurationError(f"{what}: the factory failed: {exc!r}"),
            "fix the factory (--debug shows where it failed)",
        ) from exc
    except SystemExit as exc:
        raise with_hint(
            ConfigurationError(f"{what}: the factory called exit({exc.code!r})"),
            f"the factory must return {returns}, not exit",
        ) from exc


async def load_app(ref: str) -> Runtime:
    """The host's Runtime from `--app module:factory` (a zero-argument
    callable, sync or async, returning a `taskloom.Runtime`)."""
    factory = load_object(ref, "--app", "module:factory")
    if not callable(factory):
        raise with_hint(
            ConfigurationError(f"--app {ref}: {type(factory).__name__} is not a factory"),
            "point --app at a function that takes no arguments and returns a taskloom.Runtime",
        )
    runtime = await _made(factory, f"--app {ref}", "the host's taskloom.Runtime")
    if not isinstance(runtime, Runtime):
        raise with_hint(
            ConfigurationError(f"--app {ref} returned {type(runtime).__name__}, not a Runtime"),
            "the factory must return the host's taskloom.Runtime",
        )
    return runtime


async def load_agent(ref: str, command: str) -> Agent:
    """The agent `module:agent` names for `command` (an Agent, or a
    zero-argument factory, sync or async, returning one)."""
    found = load_object(ref, command, "module:agent")
    if not isinstance(found, Agent) and callable(found):
        found = await _made(found, f"{command} {ref}", "a taskloom.Agent")
    if not isinstance(found, Agent):
        raise with_hint(
            ConfigurationError(f"{command} {ref} is a {type(found).__name__}, not an Agent"),
            "point it at a taskloom.Agent, or a function that takes no arguments and returns one",
        )
    return found


def app_agent(runtime: Runtime, name: str, ref: str, needed_by: str) -> Agent:
    """The agent called `name` among the app's `runtime.agents`."""
    agents: Any = getattr(runtime, "agents", None) or {}
    if isinstance(agents, Mapping):
        agent = agents.get(name)
    else:
        agent = next((a for a in agents if getattr(a, "name", None) == name), None)
    if not isinstance(agent, Agent):
        raise with_hint(
            UsageError(f"--app {ref}: its Runtime has no agent named {name!r} ({needed_by})"),
            f"add an Agent named {name!r} to that Runtime's agents, "
            "or pass --model PROVIDER:MODEL and a --tool module:attribute per tool instead",
        )
    return agent


async def open_runtime(
    where: Where, flags: AgentFlags | None = None, *, create: bool = True
) -> Runtime:
    """The app's runtime with `--app` (refusing agent `flags` beside it), else
    one on `--store` (default: the embedded store); with `create=False` a
    missing store is a `StoreNotFound` at first use, and nothing is created."""
    if where.app:
        if where.store:
            raise with_hint(
                UsageError("--store and --app both name a store"),
                "drop --store: the app's Runtime brings its own",
            )
        given = [f"--{f.replace('_', '-')}" for f in _MODEL_FLAGS if getattr(flags, f, None)]
        if given:
            raise with_hint(
                UsageError(f"{', '.join(given)} would be ignored with --app"),
                "drop them: the app's agent brings its own tools and instructions",
            )
        runtime = await load_app(where.app)
    else:
        runtime = store_runtime(where.store or default_store_url(), create)
    # A command may decide a child's escalated calls (`approve`, `deny`):
    # the child goes on even when no agent of the app offers delegation.
    DecidedChildren.of(runtime)
    return runtime


def store_runtime(url: str, create: bool = True, agents: list[Agent] | None = None) -> Runtime:
    """A runtime with `agents` on the store `url` names (`--store`); an unknown
    scheme is a `ConfigurationError` naming the known ones."""
    try:
        return Runtime(store=open_backend(url, create=create), agents=agents)
    except ValueError as exc:
        raise with_hint(
            ConfigurationError(f"--store {url}: {exc}"),
            "--store takes memory://, sqlite:///path or postgresql://user@host/db",
        ) from exc


def command_line_agent(
    where: Where, flags: AgentFlags, runtime: Runtime, meta: SessionMeta, command: str
) -> Agent:
    """The agent to go on with session `meta`, from this command line only."""
    name = meta.agent or "cli"
    if where.app:
        return app_agent(runtime, name, where.app, f"session {meta.id} runs it")
    if not flags.model:
        raise with_hint(
            UsageError(
                f"{command} needs the agent of session {meta.id} ({visible(name)!r}) "
                "from the command line; taskloom never loads code a session names"
            ),
            "pass --app module:factory (its Runtime's agents hold that agent), "
            "or --model PROVIDER:MODEL and a --tool module:attribute per tool",
        )
    from ..models import resolve_model

    model = resolve_model(flags.model, **flags.model_options())
    runtime.register_model(model)
    # The instructions are data, like the transcript: the recorded ones stay
    # unless the command line gives others.
    system = flags.system if flags.system is not None else meta.metadata.get("system")
    instructions = system if isinstance(system, str) else None
    return Agent(name, model, instructions, [load_tool(t) for t in flags.tool])


def agent_flags(where: Where, flags: AgentFlags) -> str:
    """The options that find the session again and rebuild its agent, for a
    printed command: `--app`, or `--store` (if given) and the model flags."""
    words = where.options()
    if not where.app:
        words += ["--model", str(flags.model)]
        for ref in flags.tool:
            words += ["--tool", ref]
        if flags.base_url:
            words += ["--base-url", flags.base_url]
        if flags.api_key_env:
            words += ["--api-key-env", flags.api_key_env]
    return shlex.join(words)
