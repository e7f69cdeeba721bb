"""How the `taskloom` command reports a failure: one line saying what went
wrong, one line saying how to fix it, exit code 2; `--debug` adds the
traceback.

Errors the CLI raises itself carry their hint as an exception note
(`with_hint`); for the rest the hint follows from the exception's type.
This module imports nothing optional: it must work when an extra is missing.
"""

from __future__ import annotations

import argparse
import re
import sys
import traceback
from typing import TypeVar

from ..errors import (
    ApprovalConflict,
    ApprovalsMissing,
    AuthenticationError,
    ConfigurationError,
    ProviderError,
    SessionBusy,
    SessionNotFound,
    StoreError,
    TaskloomError,
    TransportError,
)
from .text import visible

__all__ = ["EXIT_FAILED", "report", "with_hint"]

EXIT_FAILED = 2
"""The exit code of every failure the command reports."""

_HINT = "hint: "

E = TypeVar("E", bound=BaseException)


def with_hint(exc: E, hint: str) -> E:
    """`exc` carrying `hint`, the one line that tells the user how to fix it."""
    exc.add_note(_HINT + hint)
    return exc


def report(exc: BaseException, args: argparse.Namespace | None) -> int:
    """Print `exc` as an error line and a hint (after its traceback with
    `--debug`) on stderr; returns the exit code."""
    if args is not None and getattr(args, "debug", False):
        traceback.print_exception(exc)
    leaf = _leaf(exc)
    print(f"taskloom: {_one_line(_message(leaf))}", file=sys.stderr)
    print(f"  {_HINT}{_one_line(_hint(leaf, args))}", file=sys.stderr)
    return EXIT_FAILED


def _leaf(exc: BaseException) -> BaseException:
    # A task group's failure: the first cause is the one to fix first.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _one_line(text: str) -> str:
    # Messages quote stores, providers and tools: printed, never obeyed.
    return " ".join(visible(text).split())


def _message(exc: BaseException) -> str:
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return f"the module {exc.name.partition('.')[0]!r} is not installed ({exc})"
    text = str(exc)
    if isinstance(exc, TaskloomError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _hint(exc: BaseException, args: argparse.Namespace | None) -> str:
    for note in reversed(getattr(exc, "__notes__", ())):
        if isinstance(note, str) and note.startswith(_HINT):
            return note[len(_HINT) :]
    session = getattr(args, "session_id", None) or getattr(args, "session", None)
    command = getattr(args, "command", None) or "COMMAND"
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return _install_hint(exc.name.partition(".")[0])
    if isinstance(exc, ApprovalConflict):
        return f"the first decision stands; see it with: taskloom sessions show {session or 'ID'}"
    if isinstance(exc, ApprovalsMissing):
        return f"decide each parked call first: taskloom approve {session or 'ID'} CALL_ID [--deny]"
    if isinstance(exc, SessionNotFound):
        return "see the stored sessions with: taskloom sessions list (--store names another store)"
    if isinstance(exc, SessionBusy):
        return "another process is running this session; try again once it has finished"
    if isinstance(exc, StoreError):
        return "check --store (default: $TASKLOOM_HOME/taskloom.db) and that its database is up"
    if isinstance(exc, AuthenticationError):
        return (
            "check the API key in the provider's variable (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...)"
        )
    if isinstance(exc, TransportError):
        return (
            "check that the model server is up and reachable at that URL "
            "(--base-url, or the @URL of --model, names another)"
        )
    if isinstance(exc, ProviderError):
        return "the provider failed after retries: try again later, or check --model"
    if isinstance(exc, ConfigurationError):
        return f"check the options: taskloom {command} --help"
    if isinstance(exc, TaskloomError):
        if session:
            return f"see where the session stands: taskloom sessions show {session}"
        return f"check the options: taskloom {command} --help"
    if isinstance(exc, OSError):
        return "check the path, its permissions and free space"
    return "this looks like a bug in taskloom: rerun with --debug and report the traceback"


def _install_hint(module: str) -> str:
    extra = _extra_providing(module)
    if extra is not None:
        return f"pip install 'taskloom[{extra}]'"
    return f"install the package that provides {module!r} into the environment taskloom runs in"


def _extra_providing(module: str) -> str | None:
    """The optional extra of taskloom whose requirements provide `module`
    (read from the installed package's metadata, so it follows pyproject)."""
    from importlib import metadata

    try:
        requirements = metadata.requires("taskloom") or []
    except metadata.PackageNotFoundError:
        return None
    found: str | None = None
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", requirement)
        if name is None or extra is None:
            continue
        dist = re.sub(r"[-.]", "_", name.group().lower())
        if dist == module or dist.startswith(module + "_"):
            if extra.group(1) != "dev":
                return extra.group(1)
            found = found or extra.group(1)
    return found
