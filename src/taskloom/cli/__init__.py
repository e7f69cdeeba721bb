"""The `taskloom` command.

Subcommands import what they need when they run, so `taskloom --help` and
`import taskloom` stay cheap.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .parser import CommandParser, command_parser, examples

__all__ = ["CommandParser", "command_parser", "default_store_url", "examples", "main"]


def default_store_url() -> str:
    """The CLI's embedded store: `$TASKLOOM_HOME/taskloom.db`, by default
    under `~/.local/share/taskloom/`."""
    home = os.environ.get("TASKLOOM_HOME") or str(Path.home() / ".local" / "share" / "taskloom")
    return f"sqlite:///{Path(home) / 'taskloom.db'}"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `taskloom` console script; returns the exit code
    (see `EXIT_CODES`).

    A failure prints one line and a hint on stderr and exits with 2
    (`--debug` adds the traceback); an interrupt exits with 130; a reader
    that closes standard output early (`taskloom ... | head`) ends the
    command quietly with 141, as a tool killed by SIGPIPE would.
    """
    try:
        return _main(argv)
    except BrokenPipeError:
        from .failures import EXIT_CLOSED_PIPE

        # Python would try to flush the rest at exit and complain: the rest
        # goes nowhere instead.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass  # stdout is no file (embedded): nothing will flush to the pipe
        return EXIT_CLOSED_PIPE


def _stdout_closed() -> bool:
    """Whether the reader of standard output went away (a pipe's write end
    then polls as an error)."""
    import select

    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _main(argv: Sequence[str] | None) -> int:
    args = command_parser().parse_args(argv)
    command = None
    try:
        from .common import parse, runner

        command = parse(args)
        return runner(args)(command)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError as exc:
        if _stdout_closed():
            raise
        from .failures import report  # another pipe broke (a command's, a socket): a failure

        return report(exc, command, args.debug)
    except Exception as exc:
        from .failures import report

        return report(exc, command, args.debug)
