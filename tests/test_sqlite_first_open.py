"""Several processes opening one fresh SQLite file at the same instant all get it.

Switching a new file to WAL needs it alone for a moment, and SQLite answers
"database is locked" at once to the others, without waiting on its busy
handler. Each trial starts processes that wait at a barrier (a file that
appears), then open the same new database and write one row; every one of
them must succeed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

OPENER = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from taskloom.backends.sqlite import SQLiteDatabase

    db_path, go = sys.argv[1], sys.argv[2]
    print("READY", flush=True)
    while not os.path.exists(go):
        time.sleep(0.0005)

    async def main():
        db = SQLiteDatabase(db_path)
        db.require("t", (("CREATE TABLE IF NOT EXISTS t (pid INTEGER)",),))
        try:
            await db.run(lambda conn: conn.execute("INSERT INTO t VALUES (?)", (os.getpid(),)))
        finally:
            await db.close()

    asyncio.run(main())
    print("OK", flush=True)
    """
)


def test_processes_opening_a_fresh_file_at_once_all_succeed(tmp_path: Path) -> None:
    trials, width = 12, 6
    failed = 0
    for trial in range(trials):
        db, go = tmp_path / f"fresh{trial}.db", tmp_path / f"go{trial}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, str(db), str(go)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(width)
        ]
        try:
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().strip() == "READY"
            go.touch()
            for p in procs:
                out, err = p.communicate(timeout=60)
                if p.returncode != 0 or "OK" not in out:
                    failed += 1
                    print(f"trial {trial}: {err.strip().splitlines()[-1:]}")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    print(f"{trials} trials x {width} processes: {failed} failed")
    assert failed == 0
