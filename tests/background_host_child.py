"""A host for the host-death tests: starts one background command, then blocks.

    python background_host_child.py PIDFILE [TIMEOUT]

The command (`background_run` of `background_tools(shell=True)`, with
TIMEOUT seconds if given) writes its pid to PIDFILE, then puts a `sleep` in
a session of its own (`setsid`), which adds its pid to PIDFILE from there,
and sleeps. Once both pids are there, this process prints
`READY <command pid> <escaped pid>` and waits to be killed or stopped.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from pathlib import Path
from typing import Any

from taskloom import Agent, Runtime
from taskloom.background import background_tools
from taskloom.models import ScriptedModel, reply

PIDFILE = Path(sys.argv[1])


def written_pids() -> list[str]:
    try:
        return PIDFILE.read_text().split()
    except FileNotFoundError:
        return []


async def main() -> None:
    quoted = shlex.quote(str(PIDFILE))
    # The second pid is written from inside the new session: it names an escaped process.
    inner = f"echo $$ >> {quoted}; exec sleep 1000"
    script = f"echo $$ > {quoted}; {shlex.join(['setsid', 'sh', '-c', inner])} & exec sleep 1000"
    arguments: dict[str, Any] = {"command": script}
    if len(sys.argv) > 2:
        arguments["timeout"] = float(sys.argv[2])
    model = ScriptedModel(
        [
            reply(tool_calls=[("background_run", arguments)]),
            reply("started"),
            reply("leaving it running"),
        ]
    )
    async with Runtime() as runtime:
        tools = background_tools(shell=True, kill_grace=0.2)
        session = await runtime.create_session(Agent("host", model, tools=tools))
        await session.run("go")
        while len(pids := written_pids()) < 2:
            await asyncio.sleep(0.01)
        sys.stdout.write(f"READY {' '.join(pids)}\n")
        sys.stdout.flush()
        await asyncio.sleep(3600)


asyncio.run(main())
