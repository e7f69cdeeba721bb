"""A process that edits one file through the memory tool: `N` inserts of its
own lines into `/memories/log.md`, printing (as JSON) which were applied and
which were answered with an error.

    python memory_tool_child.py URL SCHEMA NAME N
"""

from __future__ import annotations

import asyncio
import json
import sys

from taskloom.backends import open_backend
from taskloom.memory import MemoryTool

NAMESPACE = ("race",)


async def main(url: str, schema: str, name: str, count: int) -> None:
    options = {} if schema == "-" else {"schema": schema}
    backend = open_backend(url, **options)
    assert backend.memory is not None
    tool = MemoryTool(NAMESPACE, backend.memory)
    applied, refused = [], []
    try:
        for n in range(count):
            line = f"{name}-{n}"
            arguments = {
                "command": "insert",
                "path": "/memories/log.md",
                "insert_line": 0,
                "insert_text": line,
            }
            output = await tool.call(arguments, None)
            (refused if output.is_error else applied).append(line)
    finally:
        await backend.close()
    print(json.dumps({"applied": applied, "refused": refused}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
