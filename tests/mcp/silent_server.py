"""A stdio "server" that never answers: it notes its pid in NOTES, reads its
stdin until the stdin closes, notes that too, and then sleeps on.

    python silent_server.py NOTES
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

NOTES = Path(sys.argv[1])


def note(line: str) -> None:
    with NOTES.open("a") as f:
        f.write(line + "\n")


note(f"pid {os.getpid()}")
while sys.stdin.buffer.read1(4096):
    pass
note("stdin closed")
time.sleep(600)
