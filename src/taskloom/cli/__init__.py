"""The `taskloom` command.

Subcommands import what they need when they run, so `taskloom --help` and
`import taskloom` stay cheap.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["command_parser", "default_store_url", "examples", "main", "store_options"]


def default_store_url() -> str:
    """The CLI's embedded store: `$TASKLOOM_HOME/taskloom.db`, by default
    under `~/.local/share/taskloom/`."""
    home = os.environ.get("TASKLOOM_HOME") or str(Path.home() / ".local" / "share" / "taskloom")
    return f"sqlite:///{Path(home) / 'taskloom.db'}"


def store_options(args: argparse.Namespace) -> list[str]:
    """The options that name the store this command line worked on, for a
    command printed to run next: `--app` or `--store` as given, none for the
    default store."""
    app: str | None = getattr(args, "app", None)
    if app:
        return ["--app", app]
    store: str | None = getattr(args, "store", None)
    return ["--store", store] if store else []


EXIT_CODES = """\
exit codes:
  0    done; for run and resume: the run completed
  1    the run ended without completing: awaiting approval (taskloom approve,
       then taskloom resume, as printed), stopped, out of rounds or budget,
       past its deadline, or failed (the table printed says which);
       for sessions diff: the two sessions differ; for approve: the decision is
       recorded, but the child agent it unblocks did not go on (this process
       cannot run it; the output says who takes it up)
  2    an error: one line and a hint on stderr (--debug adds the traceback)
  130  interrupted (Ctrl-C); the session keeps every step before the interrupted one
  141  standard output was closed early (piped into head, say); the rest is dropped
"""


class _Parser(argparse.ArgumentParser):
    """argparse with the command's own error format: one line saying what is
    wrong, one hint line, exit code 2 (argparse's usage dump is for `--help`)."""

    def error(self, message: str) -> NoReturn:
        from .failures import EXIT_FAILED

        print(f"taskloom: {message}", file=sys.stderr)
        print(f"  hint: see {self.prog} --help", file=sys.stderr)
        sys.exit(EXIT_FAILED)


def _dollars(text: str) -> float:
    """An argparse type: an amount of dollars above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount of dollars") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not an amount above 0")
    return value


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a number of at least 1")
    return value


_APP_HELP = "the host's factory returning its taskloom.Runtime (agents and store included)"
_STORE_HELP = "store URL (default: the embedded SQLite store)"
_MUST_EXIST = "store URL of an existing store (default: the embedded SQLite store)"
_SESSION_HELP = "a session's id, as `taskloom sessions list` shows it"
_KEYS = """\
the model's API key is read from its provider's environment variable
(OPENAI_API_KEY, ANTHROPIC_API_KEY, GOOGLE_API_KEY, ...), never from a flag.
"""


def examples(*lines: str, then: str = "") -> str:
    """A command's `--help` epilog: its example command lines, and `then`,
    a paragraph to read after them."""
    return "examples:\n" + "".join(f"  {line}\n" for line in lines) + (f"\n{then}" if then else "")


def _app_option(parser: Any) -> None:
    """`--app`: an argparse parser or group."""
    parser.add_argument("--app", default=None, metavar="MODULE:FACTORY", help=_APP_HELP)


def _agent_options(parser: argparse.ArgumentParser) -> None:
    """How an acting command gets its agent: from the app, or from flags."""
    source = parser.add_mutually_exclusive_group()
    _app_option(source)
    source.add_argument("--model", default=None, help="PROVIDER:MODEL, e.g. openai:gpt-4.1-mini")
    parser.add_argument(
        "--tool", action="append", default=[], help="a tool as module:attribute (repeatable)"
    )
    parser.add_argument("--system", default=None, help="instructions (system prompt)")
    parser.add_argument("--base-url", default=None, help="the model server's base URL")
    parser.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help="the environment variable holding the key to send to the model server "
        "(a provider's own variable is sent only to that provider's host)",
    )
    parser.add_argument(
        "--max-rounds",
        type=_positive,
        default=20,
        metavar="N",
        help="model rounds the run may take; past them it ends out of rounds (default 20)",
    )
    parser.add_argument(
        "--budget-tokens",
        type=_positive,
        default=None,
        help="a token ceiling for the run and every child under it",
    )
    parser.add_argument(
        "--budget-usd",
        type=_dollars,
        default=None,
        help="a dollar ceiling for the run and every child under it (priced by genai-prices)",
    )


def command_parser() -> argparse.ArgumentParser:
    """The `taskloom` command's parser: every command, with its help text
    and examples."""
    # --debug is read before or after the command: the subcommands' copies
    # leave it unset unless given, so they never reset the top-level one.
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the traceback of an error",
    )
    parser = _Parser(
        prog="taskloom",
        description="A runtime for tool-using LLM agents.",
        epilog=examples(
            "taskloom demo",
            'taskloom run "Where is Tromsø?" --model openai:gpt-4.1-mini',
            "taskloom sessions list",
            then="Each command's --help shows examples of its own.\n\n" + EXIT_CODES,
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    from .. import __version__

    parser.add_argument(
        "--version", action="version", version=f"taskloom {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str, epilog: str, into: Any = sub) -> argparse.ArgumentParser:
        made: argparse.ArgumentParser = into.add_parser(
            name,
            help=help,
            description=help[:1].upper() + help[1:] + ".",
            epilog=epilog,
            parents=[debug],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        return made

    demo = command(
        "demo",
        "an offline, scripted tour of a run (no API key needed)",
        examples("taskloom demo", "taskloom demo --fast"),
    )
    demo.add_argument("--fast", action="store_true", help="no pauses (for tests and CI)")

    run = command(
        "run",
        "run a prompt against a model and stream the answer",
        examples(
            'taskloom run "What is 17 * 23?" --model openai:gpt-4.1-mini',
            'taskloom run "Book a cabin." --model anthropic:claude-sonnet-4-5 --tool mytools:book',
            'taskloom run "Hello" --model ollama:qwen3:8b --max-rounds 5 --budget-tokens 20000',
            'taskloom run "And on Sunday?" --session ID --model openai:gpt-4.1-mini',
            'taskloom run "Plan the trip." --app myapp:runtime --agent planner',
            then=_KEYS,
        ),
    )
    run.add_argument("prompt", help="what to ask the model (quote it)")
    _agent_options(run)
    run.add_argument("--session", default=None, help="go on in this session (default: a new one)")
    run.add_argument("--agent", default=None, help="with --app: the agent to run, by name")
    run.add_argument(
        "--store", default=None, help=_STORE_HELP + "; with --session, an existing one"
    )

    sessions = command(
        "sessions",
        "list, show, fork and diff stored sessions",
        examples(
            "taskloom sessions list",
            "taskloom sessions show ID",
            "taskloom sessions fork ID --round 2",
            "taskloom sessions diff ID OTHER_ID",
        ),
    )
    ssub = sessions.add_subparsers(dest="action", required=True)
    ls = command(
        "list",
        "the newest sessions",
        examples(
            "taskloom sessions list --limit 5",
            "taskloom sessions list --json --store postgresql://localhost/agents",
        ),
        ssub,
    )
    ls.add_argument("--limit", type=_positive, default=20, help="how many (at least 1)")
    ls.add_argument("--json", action="store_true", help="print JSON, for scripts")
    ls.add_argument("--store", default=None, help=_MUST_EXIST)
    _app_option(ls)
    show = command(
        "show",
        "a session's transcript, and the commands that decide what it waits for",
        examples(
            "taskloom sessions show ID",
            "taskloom sessions show ID --tree",
            "taskloom sessions show ID --json --store sqlite:///runs.db",
        ),
        ssub,
    )
    show.add_argument("session_id", metavar="ID", help=_SESSION_HELP)
    show.add_argument("--tree", action="store_true", help="draw the delegation tree")
    show.add_argument("--json", action="store_true", help="print JSON, for scripts")
    show.add_argument("--store", default=None, help=_MUST_EXIST)
    _app_option(show)
    fork = command(
        "fork",
        "copy a session's history up to an entry into a new session",
        examples(
            "taskloom sessions fork ID",
            "taskloom sessions fork ID --at 4",
            "taskloom sessions fork ID --round 2",
            then="The new session's id is printed alone, for $(taskloom sessions fork ...).\n",
        ),
        ssub,
    )
    fork.add_argument("session_id", metavar="ID", help="the session to copy")
    # Both numbers are checked where the API checks them (`cut_position`).
    at = fork.add_mutually_exclusive_group()
    at.add_argument(
        "--at", type=int, default=None, metavar="N", help="keep entries 1..N (default: all)"
    )
    at.add_argument(
        "--round",
        type=int,
        default=None,
        metavar="R",
        help="keep what came before round R, so the model answers it afresh",
    )
    fork.add_argument("--store", default=None, help=_MUST_EXIST)
    _app_option(fork)
    diff = command(
        "diff",
        "where two sessions' rounds first differ",
        examples("taskloom sessions diff ID FORK_ID", "taskloom sessions diff ID FORK_ID --json"),
        ssub,
    )
    diff.add_argument("a", metavar="A", help="a session's id")
    diff.add_argument("b", metavar="B", help="the id of the session to compare it with")
    diff.add_argument("--json", action="store_true", help="print JSON, for scripts")
    diff.add_argument("--store", default=None, help=_MUST_EXIST)
    _app_option(diff)

    approve = command(
        "approve",
        "approve (or --deny) a parked tool call",
        examples(
            "taskloom approve ID CALL_ID",
            'taskloom approve ID CALL_ID --deny --note "over the trip budget"',
            "taskloom approve ID CALL_ID --store postgresql://localhost/agents",
            then="`taskloom run` and `taskloom sessions show` print these commands, ids filled in.\n",
        ),
    )
    approve.add_argument(
        "session_id",
        metavar="ID",
        help="the session the call waits in (for a child agent's call: the root session)",
    )
    approve.add_argument(
        "call_id", metavar="CALL_ID", help="the call's id, as run or sessions show print it"
    )
    approve.add_argument(
        "--deny", action="store_true", help="refuse the call: the model is told it was denied"
    )
    approve.add_argument(
        "--note", default=None, help="why: recorded with the decision; a denial shows it the model"
    )
    approve.add_argument("--store", default=None, help=_MUST_EXIST)
    _app_option(approve)

    answer = command(
        "answer",
        "answer a question an MCP task asks a person",
        examples(
            "taskloom answer ID INPUT_ID --set city=Tromsø --set nights=2",
            """taskloom answer ID INPUT_ID --json '{"confirm": true}'""",
            "taskloom answer ID INPUT_ID --decline",
        ),
    )
    answer.add_argument("session_id", metavar="ID", help="the session that asks")
    answer.add_argument(
        "input_id", metavar="INPUT_ID", help="the question's id, as sessions show prints it"
    )
    answer.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a field of the answer (again for each field)",
    )
    answer.add_argument("--json", default=None, help="the answer's fields as a JSON object")
    refuse = answer.add_mutually_exclusive_group()
    refuse.add_argument("--decline", action="store_true", help="decline to answer")
    refuse.add_argument("--cancel", action="store_true", help="dismiss the question")
    answer.add_argument("--store", default=None, help=_MUST_EXIST)
    _app_option(answer)

    resume = command(
        "resume",
        "go on with a session parked for approval, or whose run was cut off (a crash)",
        examples(
            "taskloom resume ID --model openai:gpt-4.1-mini --tool mytools:book",
            "taskloom resume ID --app myapp:runtime",
            then="A turn parked for approval goes on first; else a run that was cut off runs\n"
            "on from the log. Give the agent as the run that parked or was cut off had it:\n"
            "--app, or --model and a --tool per tool (taskloom never loads code a session\n"
            "names).\n\n" + _KEYS,
        ),
    )
    resume.add_argument("session_id", metavar="ID", help="the session to resume")
    _agent_options(resume)
    resume.add_argument("--store", default=None, help=_MUST_EXIST)

    from .a2a import add_a2a_commands
    from .mcp import add_mcp_commands
    from .serve import add_serve_command

    add_serve_command(
        command(
            "serve",
            "the web console: watch sessions, decide approvals",
            examples(
                "taskloom serve",
                "taskloom serve --app myapp:runtime --port 8800",
                "taskloom serve --store postgresql://localhost/agents --port 0",
            ),
        )
    )
    add_mcp_commands(
        command(
            "mcp",
            "serve an agent over the Model Context Protocol",
            examples("taskloom mcp serve myagents:researcher"),
        ),
        [debug],
    )
    add_a2a_commands(
        command(
            "a2a",
            "serve an agent over the Agent2Agent protocol",
            examples("taskloom a2a serve myagents:researcher"),
        ),
        [debug],
    )

    worker = command(
        "worker",
        "run queued runs, background children and wake-ups",
        examples(
            "taskloom worker --app myapp:runtime",
            "taskloom worker --app myapp:runtime --concurrency 8 --queues runs",
        ),
    )
    worker.add_argument(
        "--app", required=True, metavar="MODULE:FACTORY", help="the host's Runtime factory"
    )
    worker.add_argument("--concurrency", type=int, default=4, help="jobs at once (default 4)")
    worker.add_argument("--queues", default=None, help="e.g. runs,children (default: both)")

    queue = command(
        "queue", "the work queue", examples("taskloom queue status postgresql://localhost/agents")
    )
    qsub = queue.add_subparsers(dest="action", required=True)
    qstatus = command(
        "status",
        "jobs by kind and status, and the workers alive",
        examples(
            "taskloom queue status postgresql://localhost/agents",
            "taskloom queue status postgresql://localhost/agents --schema taskloom",
        ),
        qsub,
    )
    qstatus.add_argument("url", help="the PostgreSQL URL of the queue")
    qstatus.add_argument("--schema", default=None, help="the PostgreSQL schema of its tables")

    db = command(
        "db",
        "the PostgreSQL database",
        examples("taskloom db migrate postgresql://localhost/agents"),
    )
    dsub = db.add_subparsers(dest="action", required=True)
    dmigrate = command(
        "migrate",
        "create or migrate every taskloom table",
        examples(
            "taskloom db migrate postgresql://localhost/agents",
            "taskloom db migrate postgresql://localhost/agents --schema taskloom",
        ),
        dsub,
    )
    dmigrate.add_argument("url", help="postgresql://user@host:port/database")
    dmigrate.add_argument("--schema", default=None, help="the PostgreSQL schema of the tables")
    return parser


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
    try:
        if args.command == "demo":
            from .demo import run_demo

            return run_demo(fast=args.fast)
        if args.command == "run":
            from .run import run_prompt

            return run_prompt(args)
        if args.command == "serve":
            from .serve import serve_console

            return serve_console(args)
        if args.command == "mcp":
            from .mcp import run_mcp

            return run_mcp(args)
        if args.command == "a2a":
            from .a2a import run_a2a

            return run_a2a(args)
        if args.command == "worker":
            from .worker import run_worker

            return run_worker(args)
        if args.command == "queue":
            from .queue import queue_status

            return queue_status(args)
        if args.command == "db":
            from .db import migrate

            return migrate(args)
        from .sessions import dispatch

        return dispatch(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError as exc:
        if _stdout_closed():
            raise
        from .failures import report  # another pipe broke (a command's, a socket): a failure

        return report(exc, args)
    except Exception as exc:
        from .failures import report

        return report(exc, args)


if __name__ == "__main__":
    sys.exit(main())
