"""How the `taskloom` command reports a failure: one line saying what went
wrong, one line saying how to fix it, exit code 2; `--debug` adds the
traceback.

Errors the CLI raises itself carry their hint as an exception note
(`with_hint`); for the rest the hint follows from the exception's type.
This module imports nothing optional: it must work when an extra is missing.
"""

from __future__ import annotations

import shlex
import sys
import traceback
from typing import TYPE_CHECKING, TypeVar

from .._extras import EXTRAS, extra_providing, install_command
from .._redact import safe_urls
from ..errors import (
    APIKeyMissing,
    ApprovalConflict,
    ApprovalsMissing,
    AuthenticationError,
    ConfigurationError,
    ProviderError,
    SessionBusy,
    SessionNotFound,
    StoreError,
    StoreNotFound,
    TaskloomError,
    TransportError,
)
from .text import visible

if TYPE_CHECKING:
    from .common import Command

__all__ = ["EXIT_CLOSED_PIPE", "EXIT_FAILED", "report", "with_hint"]

EXIT_FAILED = 2
"""The exit code of every failure the command reports."""

EXIT_CLOSED_PIPE = 141
"""The exit code when the reader of standard output went away early: 128 +
SIGPIPE, what `cat` or `grep` report then, so `set -o pipefail` sees the
same from taskloom as from them."""

_HINT = "hint: "

E = TypeVar("E", bound=BaseException)


def with_hint(exc: E, hint: str) -> E:
    """`exc` carrying `hint`, the one line that tells the user how to fix it."""
    exc.add_note(_HINT + hint)
    return exc


def report(exc: BaseException, command: Command | None, debug: bool = False) -> int:
    """Print `exc` (raised by `command`, None before it was known) as an error
    line and a hint on stderr, after its traceback with `debug`; the exit code."""
    if debug:
        traceback.print_exception(exc)
    leaf = _leaf(exc)
    # A URL the error quotes (a store's, as its driver gives it) is shown
    # without its credentials; the hint shows the store as `--store` does.
    print(f"taskloom: {_one_line(safe_urls(_message(leaf)))}", file=sys.stderr)
    print(f"  {_HINT}{_one_line(_hint(leaf, command))}", file=sys.stderr)
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
        module = exc.name.partition(".")[0]
        extra = extra_providing(module)
        if extra is not None:
            purpose = EXTRAS[extra][0]
            return f"{purpose} needs the {extra} extra: no module named {module!r}"
        return f"the module {module!r} is not installed ({exc})"
    if isinstance(exc, APIKeyMissing):
        # The Python API's advice (api_key=) has no command-line counterpart.
        first, *others = exc.variables
        unset = (
            f"neither {first} nor {' nor '.join(others)} is set"
            if others
            else f"{first} is not set"
        )
        return f"no API key for {exc.provider}: {unset} in the environment"
    text = str(exc)
    if isinstance(exc, TaskloomError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _hint(exc: BaseException, given: Command | None) -> str:
    for note in reversed(getattr(exc, "__notes__", ())):
        if isinstance(note, str) and note.startswith(_HINT):
            return note[len(_HINT) :]
    session = given.session_id if given else None
    command = given.command if given else "COMMAND"
    where = shlex.join(given.where.options()) if given else ""
    on = f" {where}" if where else ""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        module = exc.name.partition(".")[0]
        extra = extra_providing(module)
        if extra is not None:
            return install_command(extra)
        return f"install the package that provides {module!r} into the environment taskloom runs in"
    if isinstance(exc, APIKeyMissing):
        # Never a flag: a key on the command line is visible to other users.
        return (
            f"export {exc.variables[0]}=... in the shell that runs taskloom "
            "(taskloom takes no key on the command line)"
        )
    named = session or "ID"
    if isinstance(exc, ApprovalConflict):
        return f"the first decision stands; see it with: taskloom sessions show {named}{on}"
    if isinstance(exc, ApprovalsMissing):
        return f"decide each parked call first: taskloom approve {named} CALL_ID{on} [--deny]"
    if isinstance(exc, SessionNotFound):
        if where:
            return f"see the stored sessions with: taskloom sessions list {where}"
        return "see the stored sessions with: taskloom sessions list (--store names another store)"
    if isinstance(exc, SessionBusy):
        return "another process is running this session; try again once it has finished"
    if isinstance(exc, StoreNotFound):
        return (
            "check the path; a store is created by the first taskloom run on it "
            "(default: $TASKLOOM_HOME/taskloom.db, --store names another)"
        )
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
            return f"see where the session stands: taskloom sessions show {session}{on}"
        return f"check the options: taskloom {command} --help"
    if isinstance(exc, OSError):
        return "check the path, its permissions and free space"
    return "this looks like a bug in taskloom: rerun with --debug and report the traceback"
