"""A host for the host-death tests: starts one background command, then blocks.

    python background_host_child.py PIDFILE

The command is a `sleep` that first puts another `sleep` in a session of its
own (`setsid`), which writes its pid to PIDFILE from there. Once that pid is there, this
process prints `READY <command pid> <escaped pid>` and waits to be SIGKILLed.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import tempfile
from pathlib import Path

from taskloom.background._process import CommandProcess, OutputCapture

PIDFILE = Path(sys.argv[1])


def written_pid() -> str:
    try:
        return PIDFILE.read_text().strip()
    except FileNotFoundError:
        return ""


async def main() -> None:
    spill = Path(tempfile.mkdtemp()) / "spill.log"
    # The pid is written from inside the new session: it names an escaped process.
    inner = f"echo $$ > {shlex.quote(str(PIDFILE))}; exec sleep 1000"
    script = f"{shlex.join(['setsid', 'sh', '-c', inner])} & exec sleep 1000"
    output = OutputCapture(100, 100, lambda: spill)
    process = await CommandProcess.start("sleeper", ["sh", "-c", script], output=output)
    while not (escaped := written_pid()):
        await asyncio.sleep(0.01)
    sys.stdout.write(f"READY {process.pid} {escaped}\n")
    sys.stdout.flush()
    await asyncio.sleep(3600)


asyncio.run(main())
