"""What a plain program imports: `import taskloom` and a run on the memory
store with plain tools load none of the optional parts (extras, databases,
the console, the command line, delegation) nor what only some runs need
(pydantic and docstring parsing for plain tools, diffing, decimals). Each
is a fixed cost of every fresh process that has no use for it."""

from __future__ import annotations

import json

from fresh_process import run_fresh

NEVER = (
    # the extras' libraries (see taskloom._extras)
    "psycopg",
    "psycopg_pool",
    "procrastinate",
    "mcp",
    "mcp_types",
    "a2a",
    "httpx",
    "opentelemetry",
    "rich",
    "starlette",
    "uvicorn",
    "jinja2",
    "genai_prices",
    "pytest",
    # what only some runs or stores need
    "sqlite3",
    "pydantic",
    "pydantic_core",
    "docstring_parser",
    "difflib",
    "decimal",
    # ids are drawn from os.urandom (taskloom._ids): uuid imports platform
    "uuid",
    "platform",
    "secrets",
)

NEVER_OWN = (
    "taskloom.cli",
    "taskloom.console",
    "taskloom.mcp",
    "taskloom.a2a",
    "taskloom.distributed",
    "taskloom.delegation",
    "taskloom.testing",
    "taskloom.backends.sqlite",
    "taskloom.backends.postgres",
)

# Classes a plain run never makes, whose modules load at their first use.
LOADED_ON_USE = ("MemoryItem", "MemoryMemories", "PoolOptions", "Compaction", "Compactor")

CHILD = """
import json, sys
{code}
tops = sorted({{m.partition('.')[0] for m in sys.modules}})
print(json.dumps([tops, sorted(sys.modules)]))
"""


def loaded(code: str) -> tuple[set[str], set[str]]:
    tops, modules = json.loads(run_fresh(CHILD.format(code=code)))
    return set(tops), set(modules)


def own_parts(modules: set[str]) -> set[str]:
    return {p for p in NEVER_OWN if any(m == p or m.startswith(p + ".") for m in modules)}


def test_import_taskloom_loads_no_optional_part() -> None:
    tops, modules = loaded(
        "import taskloom\n"
        "from taskloom import Agent, Runtime, tool\n"
        "from taskloom.models import OpenAIChatModel\n"
    )
    assert tops & set(NEVER) == set()
    assert own_parts(modules) == set()
    # The events are made only for a subscriber (the deltas an adapter
    # streams excepted): their classes are built once something listens.
    assert "taskloom.events" not in modules
    # Background work and tracing start with a runtime's first run.
    assert not any(m.startswith(("taskloom.background", "taskloom.tracing")) for m in modules)


def test_a_plain_run_loads_no_optional_part() -> None:
    tops, modules = loaded(
        "from taskloom import Agent, tool\n"
        "from taskloom.models import ScriptedModel, reply\n"
        "@tool(blocking=False)\n"
        "def add(a: int, b: int) -> int:\n"
        "    '''Add two integers.'''\n"
        "    return a + b\n"
        "model = ScriptedModel([reply(tool_calls=[('add', {'a': 1, 'b': 2})]), reply('3')])\n"
        "assert Agent('adder', model, 'Add.', tools=[add]).run_sync('1 + 2?').text == '3'\n"
        # Round strategies are imported by a run that has one (or a name
        # read): no module of taskloom holds their decisions yet.
        "assert not any('RoundDecision' in vars(m) for n, m in list(sys.modules.items())\n"
        "               if n.startswith('taskloom.'))\n"
        # Nor the entry payloads a plain run does not write (steering,
        # approvals, children...): only its start, messages, calls and end.
        "for name in ('Steer', 'ApprovalDecision', 'CompactionEntry', 'SubagentResult'):\n"
        "    assert not any(name in vars(m) for n, m in list(sys.modules.items())\n"
        "                   if n.startswith('taskloom.')), name\n"
        # Nor long-term memory, the PostgreSQL pool's options (named by the
        # backends' package) or compaction's machinery (an agent with a
        # policy loads it).
        f"for name in {LOADED_ON_USE!r}:\n"
        "    assert not any(name in vars(m) for n, m in list(sys.modules.items())\n"
        "                   if n.startswith('taskloom.')), name\n"
    )
    assert tops & set(NEVER) == set()
    assert own_parts(modules) == set()
    assert "taskloom.events" not in modules


def test_every_kind_reads_in_a_process_that_has_not_loaded_its_payload() -> None:
    # A process that reads a log before naming a payload class (a worker, a
    # resume) still decodes every kind taskloom writes: none reads as foreign.
    loaded(
        "import taskloom\n"
        "from taskloom.entries import Entry, EntryKind\n"
        "from taskloom.errors import CorruptEntry\n"
        "assert 'Steer' not in vars(taskloom.entries)\n"
        "assert Entry(EntryKind.STEER, {'text': 'go on'}).payload.text == 'go on'\n"
        "stop = Entry(EntryKind.STOP_REQUEST, {'reason': 'enough'}).payload\n"
        "assert type(stop).__name__ == 'StopRequest' and stop.reason == 'enough'\n"
        "for kind in [v for k, v in vars(EntryKind).items() if k.isupper()]:\n"
        "    try:\n"
        "        payload = Entry(kind, {}).payload\n"
        "    except CorruptEntry:\n"
        "        continue  # its class was found: the data is not its shape\n"
        "    assert payload is not None and payload.KIND == kind, kind\n"
        "assert taskloom.entries.Steer is type(Entry(EntryKind.STEER, {'text': ''}).payload)\n"
    )


def test_a_subscribed_run_gets_every_event_of_a_plain_one() -> None:
    # A run nobody listens to never imports the events; the first that is
    # listened to imports them, and its events are whole.
    _, modules = loaded(
        "import asyncio\n"
        "from taskloom import Agent, tool\n"
        "from taskloom.models import ScriptedModel, reply\n"
        "@tool(blocking=False)\n"
        "def add(a: int, b: int) -> int:\n"
        "    '''Add two integers.'''\n"
        "    return a + b\n"
        "def model():\n"
        "    return ScriptedModel([reply(tool_calls=[('add', {'a': 1, 'b': 2})]), reply('3')])\n"
        "assert Agent('adder', model(), 'Add.', tools=[add]).run_sync('1 + 2?').text == '3'\n"
        "assert 'taskloom.events' not in sys.modules\n"
        "agent = Agent('adder', model(), 'Add.', tools=[add])\n"
        "async def kinds():\n"
        "    return [type(e).__name__ for e in [e async for e in agent.stream('1 + 2?')]]\n"
        "seen = asyncio.run(kinds())\n"
        "assert seen[0] == 'RunStarted' and seen[-1] == 'RunFinished', seen\n"
        "for kind in ('ModelRequestStarted', 'ToolCallStarted', 'ToolCallFinished',\n"
        "             'RoundCommitted', 'TextDelta'):\n"
        "    assert kind in seen, (kind, seen)\n"
    )
    assert "taskloom.events" in modules


def test_the_lazy_names_still_load_on_use() -> None:
    _, modules = loaded(
        "import taskloom\ntaskloom.SubAgent\ntaskloom.background_tools\n"
        "assert taskloom.DeferredItem.context('note').kind == 'context'\n"
    )
    assert "taskloom.delegation" in modules and "taskloom.background" in modules


def test_long_term_memory_the_pool_options_and_compaction_load_on_use() -> None:
    loaded(
        "import asyncio\n"
        "from taskloom.backends import MemoryBackend, Memories, PoolOptions\n"
        "from taskloom.backends.memory import MemoryMemories\n"
        "backend = MemoryBackend()\n"
        "assert isinstance(backend.memory, MemoryMemories) and isinstance(backend.memory, Memories)\n"
        "assert backend.memory is backend.memory\n"
        "asyncio.run(backend.memory.put(('u',), 'k', 'tea'))\n"
        "assert asyncio.run(backend.memory.get(('u',), 'k')).value == 'tea'\n"
        "assert PoolOptions(max_size=3).max_size == 3\n"
        "from taskloom import Agent, Compaction\n"
        "from taskloom.models import ScriptedModel, reply\n"
        "agent = Agent('a', ScriptedModel([reply('ok')]), compaction=Compaction())\n"
        "assert agent.run_sync('hi').text == 'ok'\n"
        f"for name in {LOADED_ON_USE!r}:\n"
        "    assert any(name in vars(m) for n, m in list(sys.modules.items())\n"
        "               if n.startswith('taskloom.')), name\n"
    )


def test_the_strategies_load_on_use_and_decide() -> None:
    # A run with a strategy imports what it needs at its start: its stop
    # decision is carried out.
    loaded(
        "from taskloom import Agent, RunOptions, RunStatus\n"
        "from taskloom.loop import RoundDecision, RoundStrategy\n"
        "from taskloom.models import ScriptedModel, reply\n"
        "class Halt:\n"
        "    async def on_round(self, ctx):\n"
        "        return RoundDecision.stop()\n"
        "model = ScriptedModel([reply('one'), reply('two')])\n"
        "result = Agent('a', model, 'Say.').run_sync('hi', options=RunOptions(strategy=Halt()))\n"
        "assert isinstance(Halt(), RoundStrategy)\n"
        "assert result.status is RunStatus.STOPPED, result.status\n"
    )
