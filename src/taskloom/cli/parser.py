"""The `taskloom` command's parser: every command, its options, help text
and examples. It imports nothing heavy, so `taskloom --help` stays fast."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["A2A_TOKEN", "CONSOLE_TOKEN", "MCP_TOKEN", "CommandParser", "command_parser", "examples"]

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


class CommandParser(argparse.ArgumentParser):
    """argparse with the command's own error format: one line saying what is
    wrong, one hint line, exit code 2 (argparse's usage dump is for `--help`);
    `commands` holds its subcommands' help and parsers by name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, tuple[str, CommandParser]] = {}
        self.subcommands: Any = None

    def helps(self) -> dict[str, str | None]:
        """What `--help` says of each argument (by its first option string,
        or its name) and each subcommand."""
        said = {
            (action.option_strings or [action.dest])[0]: action.help
            for action in self._actions
            if action is not self.subcommands
        }
        return said | {name: help for name, (help, _) in self.commands.items()}

    def error(self, message: str) -> NoReturn:
        from .failures import EXIT_FAILED

        print(f"taskloom: {message}", file=sys.stderr)
        print(f"  hint: see {self.prog} --help", file=sys.stderr)
        sys.exit(EXIT_FAILED)


def _number(
    convert: Callable[[str], Any], ok: Callable[[Any], bool], wrong: str, outside: str
) -> Callable[[str], Any]:
    """An argparse type: `convert`ed text, refused with `wrong` (formatted with
    `text`) or, when not `ok`, with `outside` (with `text` and `value`)."""

    def typed(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(wrong.format(text=text)) from None
        if not ok(value):
            raise argparse.ArgumentTypeError(outside.format(text=text, value=value))
        return value

    return typed


_dollars = _number(
    float,
    lambda v: v > 0,
    "{text!r} is not an amount of dollars",
    "{text} is not an amount above 0",
)
_positive = _number(
    int, lambda v: v >= 1, "{text!r} is not a whole number", "{value} is not a number of at least 1"
)
_port = _number(
    int,
    lambda v: 0 <= v <= 65535,
    "{text!r} is not a port number (0 to 65535)",
    "{value} is not a port number (0 to 65535)",
)


def _size(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of bytes")
    return int(text)


_APP_HELP = "the host's factory returning its taskloom.Runtime (agents and store included)"
_STORE_HELP = "store URL (default: the embedded SQLite store)"
_MUST_EXIST = "store URL of an existing store (default: the embedded SQLite store)"
_SESSION_HELP = "a session's id, as `taskloom sessions list` shows it"
CONSOLE_TOKEN = "TASKLOOM_CONSOLE_TOKEN"
"""The default environment variable holding the console's access token."""
MCP_TOKEN = "TASKLOOM_MCP_TOKEN"
"""The default environment variable holding the bearer token MCP clients must send."""
A2A_TOKEN = "TASKLOOM_A2A_TOKEN"
"""The default environment variable holding the bearer token A2A clients must send."""
_KEYS = """\
the model's API key is read from its provider's environment variable
(OPENAI_API_KEY, ANTHROPIC_API_KEY, GOOGLE_API_KEY, ...), never from a flag.
"""


def examples(*lines: str, then: str = "") -> str:
    """A command's `--help` epilog: its example command lines, and `then`,
    a paragraph to read after them."""
    return "examples:\n" + "".join(f"  {line}\n" for line in lines) + (f"\n{then}" if then else "")


def _app_option(parser: Any) -> None:  # a parser or a group
    parser.add_argument("--app", metavar="MODULE:FACTORY", help=_APP_HELP)


def _existing_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", help=_MUST_EXIST)
    _app_option(parser)


def _max_body(parser: argparse.ArgumentParser, default: int) -> None:
    parser.add_argument(
        "--max-body",
        type=_size,
        default=default,
        metavar="BYTES",
        help=f"refuse a request whose body passes BYTES (default {default})",
    )


def _agent_options(parser: argparse.ArgumentParser) -> None:
    """How an acting command gets its agent: from the app, or from flags."""
    source = parser.add_mutually_exclusive_group()
    _app_option(source)
    source.add_argument("--model", help="PROVIDER:MODEL, e.g. openai:gpt-4.1-mini")
    parser.add_argument(
        "--tool", action="append", default=[], help="a tool as module:attribute (repeatable)"
    )
    parser.add_argument("--system", help="instructions (system prompt)")
    parser.add_argument("--base-url", help="the model server's base URL")
    parser.add_argument(
        "--api-key-env",
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
    ceiling = "a {} ceiling for the run and every child under it"
    parser.add_argument("--budget-tokens", type=_positive, help=ceiling.format("token"))
    priced = ceiling.format("dollar") + " (priced by genai-prices)"
    parser.add_argument("--budget-usd", type=_dollars, help=priced)


MAX_MEMORY_LIMIT = 10_000
"""The most items one `taskloom memory list` or `search` prints (the store's own cap)."""

_memory_limit = _number(
    int,
    lambda v: 1 <= v <= MAX_MEMORY_LIMIT,
    "{text!r} is not a whole number",
    f"{{value}} is not a number from 1 to {MAX_MEMORY_LIMIT}",
)
_offset = _number(
    int, lambda v: v >= 0, "{text!r} is not a whole number", "{value} is not a number of at least 0"
)

NAMESPACE_SYNTAX = """\
A namespace is written as its parts joined by /: user/u1 is ("user", "u1").
Inside a part, write / as %2F and % as %25 (user/a%2Fb is ("user", "a/b"));
the namespaces printed are written so, to be pasted back. A prefix
matches whole parts: user matches user/u1, not users/u1; "" (or /) is every
namespace. A memory:// store lives in one process: here it is always empty.
"""


def _memory_commands(command: Callable[..., CommandParser], parser: CommandParser) -> None:
    """`taskloom memory list|show|search|namespaces`: read a store's long-term memory."""
    memory = command(
        "memory",
        "read the long-term memory (items in namespaces) of a store",
        examples(
            "taskloom memory list user/u1 --store sqlite:///agents.db",
            "taskloom memory show user/u1 preferences --store sqlite:///agents.db",
            'taskloom memory search user "coffee order" --store postgresql://localhost/agents',
            "taskloom memory namespaces --store postgresql://localhost/agents",
            then=NAMESPACE_SYNTAX,
        ),
    )
    prefix_help = "a namespace prefix such as user or user/u1 (default: every namespace)"
    ls = command(
        "list",
        "the items under a namespace prefix, by namespace then key",
        examples(
            "taskloom memory list --store sqlite:///agents.db",
            "taskloom memory list user/u1 --limit 500 --json --store sqlite:///agents.db",
            "taskloom memory list user --offset 100 --store postgresql://localhost/agents",
            then=NAMESPACE_SYNTAX,
        ),
        memory,
    )
    ls.add_argument("prefix", nargs="?", default="", metavar="NAMESPACE-PREFIX", help=prefix_help)
    _page_options(ls, 50)
    show = command(
        "show",
        "one item: its value in full, its version and times",
        examples(
            "taskloom memory show user/u1 preferences --store sqlite:///agents.db",
            "taskloom memory show agent/planner notes --json --store sqlite:///agents.db",
            then=NAMESPACE_SYNTAX,
        ),
        memory,
    )
    show.add_argument("namespace", metavar="NAMESPACE", help="the item's namespace, e.g. user/u1")
    show.add_argument("key", metavar="KEY", help="the item's key, as given (no escaping)")
    show.add_argument("--json", action="store_true", help="print JSON, for scripts")
    _existing_store(show)
    search = command(
        "search",
        "full-text search of the items under a namespace prefix, most relevant first",
        examples(
            'taskloom memory search user/u1 "coffee order" --store sqlite:///agents.db',
            'taskloom memory search "" deadline --limit 5 --json --store sqlite:///agents.db',
            then="An item matches when its value holds a word of QUERY (case and accents\n"
            "ignored; in a JSON value, the words of its strings).\n\n" + NAMESPACE_SYNTAX,
        ),
        memory,
    )
    search.add_argument(
        "prefix", metavar="PREFIX", help='a namespace prefix such as user/u1 ("": every namespace)'
    )
    search.add_argument("query", metavar="QUERY", help="the words to look for (quote them)")
    _page_options(search, 10, offset=False)
    names = command(
        "namespaces",
        "the namespaces that hold items, under a prefix",
        examples(
            "taskloom memory namespaces --store sqlite:///agents.db",
            "taskloom memory namespaces user --json --store postgresql://localhost/agents",
            then=NAMESPACE_SYNTAX,
        ),
        memory,
    )
    names.add_argument("prefix", nargs="?", default="", metavar="PREFIX", help=prefix_help)
    _page_options(names, 1000, offset=False)


def _page_options(parser: CommandParser, limit: int, *, offset: bool = True) -> None:
    """`--limit`, `--offset` (unless not `offset`), `--json` and the store options."""
    parser.add_argument(
        "--limit",
        type=_memory_limit,
        default=limit,
        metavar="N",
        help=f"print at most N, 1 to {MAX_MEMORY_LIMIT} (default {limit})",
    )
    if offset:
        parser.add_argument(
            "--offset", type=_offset, default=0, metavar="N", help="skip the first N (default 0)"
        )
    parser.add_argument("--json", action="store_true", help="print JSON, for scripts")
    _existing_store(parser)


def command_parser() -> CommandParser:
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
    parser = CommandParser(
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

    def command(name: str, help: str, epilog: str, parent: CommandParser = parser) -> CommandParser:
        if parent.subcommands is None:
            dest = "command" if parent is parser else "action"
            parent.subcommands = parent.add_subparsers(dest=dest, required=True)
        made: CommandParser = parent.subcommands.add_parser(
            name,
            help=help,
            description=help[:1].upper() + help[1:] + ".",
            epilog=epilog,
            parents=[debug],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parent.commands[name] = (help, made)
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
    run.add_argument(
        "--session",
        dest="session_id",
        metavar="SESSION",
        help="go on in this session (default: a new one)",
    )
    run.add_argument("--agent", help="with --app: the agent to run, by name")
    run.add_argument("--store", help=_STORE_HELP + "; with --session, an existing one")

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
    ls = command(
        "list",
        "the newest sessions",
        examples(
            "taskloom sessions list --limit 5",
            "taskloom sessions list --json --store postgresql://localhost/agents",
        ),
        sessions,
    )
    ls.add_argument("--limit", type=_positive, default=20, help="how many (at least 1)")
    ls.add_argument("--json", action="store_true", help="print JSON, for scripts")
    _existing_store(ls)
    show = command(
        "show",
        "a session's transcript, and the commands that decide what it waits for",
        examples(
            "taskloom sessions show ID",
            "taskloom sessions show ID --tree",
            "taskloom sessions show ID --json --store sqlite:///runs.db",
        ),
        sessions,
    )
    show.add_argument("session_id", metavar="ID", help=_SESSION_HELP)
    show.add_argument("--tree", action="store_true", help="draw the delegation tree")
    show.add_argument("--json", action="store_true", help="print JSON, for scripts")
    _existing_store(show)
    fork = command(
        "fork",
        "copy a session's history up to an entry into a new session",
        examples(
            "taskloom sessions fork ID",
            "taskloom sessions fork ID --at 4",
            "taskloom sessions fork ID --round 2",
            then="The new session's id is printed alone, for $(taskloom sessions fork ...).\n",
        ),
        sessions,
    )
    fork.add_argument("session_id", metavar="ID", help="the session to copy")
    # Both numbers are checked where the API checks them (`cut_position`).
    at = fork.add_mutually_exclusive_group()
    at.add_argument("--at", type=int, metavar="N", help="keep entries 1..N (default: all)")
    at.add_argument(
        "--round",
        type=int,
        metavar="R",
        help="keep what came before round R, so the model answers it afresh",
    )
    _existing_store(fork)
    diff = command(
        "diff",
        "where two sessions' rounds first differ",
        examples("taskloom sessions diff ID FORK_ID", "taskloom sessions diff ID FORK_ID --json"),
        sessions,
    )
    diff.add_argument("a", metavar="A", help="a session's id")
    diff.add_argument("b", metavar="B", help="the id of the session to compare it with")
    diff.add_argument("--json", action="store_true", help="print JSON, for scripts")
    _existing_store(diff)

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
        "--note", help="why: recorded with the decision; a denial shows it the model"
    )
    _existing_store(approve)

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
    answer.add_argument("--json", help="the answer's fields as a JSON object")
    refuse = answer.add_mutually_exclusive_group()
    refuse.add_argument("--decline", action="store_true", help="decline to answer")
    refuse.add_argument("--cancel", action="store_true", help="dismiss the question")
    _existing_store(answer)

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
    resume.add_argument("--store", help=_MUST_EXIST)

    from .._serving import MAX_FORM_BODY, MAX_JSONRPC_BODY

    serve = command(
        "serve",
        "the web console: watch sessions, decide approvals",
        examples(
            "taskloom serve",
            "taskloom serve --app myapp:runtime --port 8800",
            "taskloom serve --store postgresql://localhost/agents --port 0",
        ),
    )
    serve.add_argument("--store", help=_STORE_HELP)
    serve.add_argument(
        "--app",
        metavar="MODULE:FACTORY",
        help="the host's factory returning its taskloom.Runtime: approve, resume, steer, stop",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    serve.add_argument(
        "--port", type=_port, default=8765, help="port, 0 to 65535 (0: any free port)"
    )
    serve.add_argument(
        "--token", help=f"the access token (default: ${CONSOLE_TOKEN}, else a fresh one, printed)"
    )
    _max_body(serve, MAX_FORM_BODY)

    mcp = command(
        "mcp",
        "serve an agent over the Model Context Protocol",
        examples("taskloom mcp serve myagents:researcher"),
    )
    mcp_serve = command(
        "serve",
        "serve an agent as an MCP server with one tool",
        examples(
            "taskloom mcp serve myagents:researcher",
            "taskloom mcp serve myagents:make_researcher --http 127.0.0.1:8000",
            "taskloom mcp serve myagents:researcher --http 127.0.0.1:0 --store sqlite:///mcp.db",
            then="MODULE:AGENT is found like python -m finds a module (this folder included).\n",
        ),
        mcp,
    )
    a2a = command(
        "a2a",
        "serve an agent over the Agent2Agent protocol",
        examples("taskloom a2a serve myagents:researcher"),
    )
    a2a_serve = command(
        "serve",
        "serve an agent over A2A",
        examples(
            "taskloom a2a serve myagents:researcher",
            "taskloom a2a serve myagents:researcher --http 127.0.0.1:9000 --store sqlite:///a2a.db",
            "taskloom a2a serve myagents:researcher --http 0.0.0.0:8000 --token-env RESEARCH_TOKEN",
            then=f"The bearer token clients must send is read from ${A2A_TOKEN} (or the\n"
            "variable --token-env names), never from the command line.\n",
        ),
        a2a,
    )
    served = (
        (mcp_serve, None, "serve streamable HTTP at http://HOST:PORT/mcp (default: stdio)"),
        (a2a_serve, "127.0.0.1:8000", "listen at http://HOST:PORT/ (default 127.0.0.1:8000)"),
    )
    for parser_, http, listen in served:
        parser_.add_argument(
            "agent", metavar="MODULE:AGENT", help="an Agent, or a factory returning one"
        )
        parser_.add_argument(
            "--http", default=http, metavar="HOST:PORT", help=f"{listen}; port 0 picks one"
        )
    mcp_serve.add_argument("--store", default="memory://", help="store URL for the calls' sessions")
    a2a_serve.add_argument("--store", default="memory://", help="store URL for the tasks' sessions")
    for parser_, variable in ((mcp_serve, MCP_TOKEN), (a2a_serve, A2A_TOKEN)):
        parser_.add_argument(
            "--token-env",
            default=variable,
            metavar="NAME",
            help=f"environment variable with the bearer token clients must send (default "
            f"{variable}; unset: no token, and only a loopback address)",
        )
        _max_body(parser_, MAX_JSONRPC_BODY)

    worker = command(
        "worker",
        "run queued runs, background children and wake-ups",
        examples(
            "taskloom worker --app myapp:runtime",
            "taskloom worker --app myapp:runtime --concurrency 8 --queues runs",
            "taskloom worker --app myapp:runtime --temporal localhost:7233 --task-queue agents",
        ),
    )
    worker.add_argument(
        "--app", required=True, metavar="MODULE:FACTORY", help="the host's Runtime factory"
    )
    worker.add_argument("--concurrency", type=int, default=4, help="jobs at once (default 4)")
    worker.add_argument("--queues", help="e.g. runs,children (default: both)")
    worker.add_argument(
        "--temporal",
        metavar="ADDRESS",
        help="run on Temporal at ADDRESS (host:port); the app's queue is a TemporalQueue",
    )
    worker.add_argument("--namespace", help="the Temporal namespace (default: the queue's)")
    worker.add_argument("--task-queue", help="the Temporal task queue (default: the queue's)")

    queue = command(
        "queue", "the work queue", examples("taskloom queue status postgresql://localhost/agents")
    )
    qstatus = command(
        "status",
        "jobs by kind and status, and the workers alive",
        examples(
            "taskloom queue status postgresql://localhost/agents",
            "taskloom queue status postgresql://localhost/agents --schema taskloom",
            "taskloom queue status --temporal localhost:7233 --task-queue agents",
        ),
        queue,
    )
    qstatus.add_argument(
        "url", nargs="?", help="the PostgreSQL URL of the queue (not with --temporal)"
    )
    qstatus.add_argument("--schema", help="the PostgreSQL schema of its tables")
    qstatus.add_argument(
        "--temporal",
        metavar="ADDRESS",
        help="the queue on Temporal at ADDRESS (host:port): its workflows and pollers",
    )
    qstatus.add_argument("--namespace", help="the Temporal namespace (default: default)")
    qstatus.add_argument("--task-queue", help="the Temporal task queue (default taskloom)")

    _memory_commands(command, parser)

    db = command(
        "db",
        "the PostgreSQL database",
        examples("taskloom db migrate postgresql://localhost/agents"),
    )
    dmigrate = command(
        "migrate",
        "create or migrate every taskloom table",
        examples(
            "taskloom db migrate postgresql://localhost/agents",
            "taskloom db migrate postgresql://localhost/agents --schema taskloom",
        ),
        db,
    )
    dmigrate.add_argument("url", help="postgresql://user@host:port/database")
    dmigrate.add_argument("--schema", help="the PostgreSQL schema of the tables")
    return parser
