"""The code a CLI command runs comes from its own command line, never from a store.

A session's log and metadata are data: a tampered store must not be able to
make `taskloom` import anything. Reading and deciding commands build no
agent: they work on `--store`, or on the store of the Runtime that `--app`
returns, and import nothing else. Acting commands (`resume`, `run
--session`) build the session's agent from `--app module:factory` — the
host's factory returning its `Runtime`, whose `agents` include the one the
session records — or from `--model` and `--tool` given on that same command
line.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import shlex
import sys
from collections.abc import Mapping
from typing import Any

from ..agent import Agent
from ..backends import SessionMeta, open_backend
from ..delegation import DecidedChildren
from ..errors import ConfigurationError, UsageError
from ..loop import Budget, RunOptions
from ..runtime import Runtime
from ..tools import Tool, as_tool
from . import default_store_url, store_options
from .failures import with_hint
from .text import visible

__all__ = [
    "agent_flags",
    "app_agent",
    "command_line_agent",
    "load_app",
    "load_object",
    "load_tool",
    "model_options",
    "open_runtime",
    "run_options",
    "store_runtime",
]


def load_object(ref: str, flag: str, shape: str = "module:attribute") -> Any:
    """The attribute `module:attribute` names (given as `flag` on the command
    line; `shape` is how errors spell what the flag takes).

    The working directory is searched last, after the installed packages, so
    a host's own modules load with the console script as with `python -m`.
    """
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


async def load_app(ref: str) -> Runtime:
    """The host's Runtime from `--app module:factory` (a zero-argument
    callable, sync or async, returning a `taskloom.Runtime`)."""
    factory = load_object(ref, "--app", "module:factory")
    if not callable(factory):
        raise with_hint(
            ConfigurationError(f"--app {ref}: {type(factory).__name__} is not a factory"),
            "point --app at a function that takes no arguments and returns a taskloom.Runtime",
        )
    try:
        runtime = factory()
        if inspect.isawaitable(runtime):
            runtime = await runtime
    except Exception as exc:
        raise with_hint(
            ConfigurationError(f"--app {ref}: the factory failed: {exc!r}"),
            "fix the factory (--debug shows where it failed)",
        ) from exc
    except SystemExit as exc:
        raise with_hint(
            ConfigurationError(f"--app {ref}: the factory called exit({exc.code!r})"),
            "the factory must return the host's taskloom.Runtime, not exit",
        ) from exc
    if not isinstance(runtime, Runtime):
        raise with_hint(
            ConfigurationError(f"--app {ref} returned {type(runtime).__name__}, not a Runtime"),
            "the factory must return the host's taskloom.Runtime",
        )
    return runtime


def app_agent(runtime: Runtime, name: str, ref: str, needed_by: str) -> Agent:
    """The agent called `name` among the app's `runtime.agents` (a mapping by
    name, or agents)."""
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


_MODEL_FLAGS = ("tool", "system", "base_url", "api_key_env")


async def open_runtime(args: argparse.Namespace, *, create: bool = True) -> Runtime:
    """The runtime a command works in: the app's with `--app`, else one on
    `--store` (default: the embedded store).

    `create=False` is for commands that read or go on with sessions: a store
    that does not exist is then an error naming it (`StoreNotFound`, at
    first use), and nothing is created. The app's store is the app's to open.
    """
    app: str | None = getattr(args, "app", None)
    if app:
        if getattr(args, "store", None):
            raise with_hint(
                UsageError("--store and --app both name a store"),
                "drop --store: the app's Runtime brings its own",
            )
        given = [f"--{f.replace('_', '-')}" for f in _MODEL_FLAGS if getattr(args, f, None)]
        if given:
            raise with_hint(
                UsageError(f"{', '.join(given)} would be ignored with --app"),
                "drop them: the app's agent brings its own tools and instructions",
            )
        runtime = await load_app(app)
    else:
        runtime = store_runtime(getattr(args, "store", None) or default_store_url(), create)
    # A command may decide a child's escalated calls (`approve`, `deny`):
    # the child goes on even when no agent of the app offers delegation.
    DecidedChildren.of(runtime)
    return runtime


def store_runtime(url: str, create: bool) -> Runtime:
    """A runtime on the store `url` names (`--store`); a URL of no known
    scheme is a `ConfigurationError` saying which ones are."""
    try:
        return Runtime(store=open_backend(url, create=create))
    except ValueError as exc:
        raise with_hint(
            ConfigurationError(f"--store {url}: {exc}"),
            "--store takes memory://, sqlite:///path or postgresql://user@host/db",
        ) from exc


def command_line_agent(
    args: argparse.Namespace, runtime: Runtime, meta: SessionMeta, command: str
) -> Agent:
    """The agent to go on with session `meta`, from this command line only."""
    name = meta.agent or "cli"
    if args.app:
        return app_agent(runtime, name, args.app, f"session {meta.id} runs it")
    if not args.model:
        raise with_hint(
            UsageError(
                f"{command} needs the agent of session {meta.id} ({visible(name)!r}) "
                "from the command line; taskloom never loads code a session names"
            ),
            "pass --app module:factory (its Runtime's agents hold that agent), "
            "or --model PROVIDER:MODEL and a --tool module:attribute per tool",
        )
    from ..models import resolve_model

    options = model_options(args)
    model = resolve_model(args.model, **options)
    runtime.register_model(model)
    # The instructions are data, like the transcript: the recorded ones stay
    # unless the command line gives others.
    system = args.system if args.system is not None else meta.metadata.get("system")
    instructions = system if isinstance(system, str) else None
    return Agent(name, model, instructions, [load_tool(t) for t in args.tool])


def agent_flags(args: argparse.Namespace) -> str:
    """The options of this command line that find its session again and
    rebuild its agent, for a printed command: `--app`, or `--store` (when
    given) with `--model`, `--tool`, `--base-url` and `--api-key-env`."""
    words = store_options(args)
    if not args.app:
        words += ["--model", args.model]
        for ref in args.tool:
            words += ["--tool", ref]
        if args.base_url:
            words += ["--base-url", args.base_url]
        if args.api_key_env:
            words += ["--api-key-env", args.api_key_env]
    return shlex.join(words)


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of `--model` from `--base-url` and `--api-key-env`."""
    options: dict[str, Any] = {}
    if args.base_url:
        options["base_url"] = args.base_url
    if args.api_key_env:
        options["api_key_env"] = args.api_key_env
    return options


def run_options(args: argparse.Namespace) -> RunOptions:
    """The run's limits from `--max-rounds`, `--budget-tokens` and `--budget-usd`."""
    budget = None
    if args.budget_tokens is not None or args.budget_usd is not None:
        budget = Budget(tokens=args.budget_tokens, usd=args.budget_usd)
    return RunOptions(max_rounds=args.max_rounds, budget=budget)
