"""The Temporal engine needs only its own extra: its modules, and a worker
built from them, import neither procrastinate (the procrastinate engine's
extra) nor psycopg (PostgreSQL stores' extra) when the store is SQLite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

REFUSED = ("procrastinate", "psycopg", "psycopg_pool")

PROGRAM = f"""
import sys
from importlib.abc import MetaPathFinder

REFUSED = {REFUSED!r}


class Refuse(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (refused)", name=name)
        return None


sys.meta_path.insert(0, Refuse())

import asyncio

from taskloom import Agent, Runtime
from taskloom.distributed import TemporalQueue, TemporalWorker
from taskloom.models import ScriptedModel


async def main(store):
    queue = TemporalQueue("127.0.0.1:1", task_queue="neutral")
    bot = Agent("bot", model=ScriptedModel([]))
    runtime = Runtime(store=store, queue=queue, agents=[bot])
    worker = queue.worker(runtime, concurrency=2)
    assert isinstance(worker, TemporalWorker), worker
    session = await runtime.create_session(bot)
    print("built", worker.task_queue, session.id[:0] + "ok")
    await runtime.close()


asyncio.run(main(sys.argv[1]))
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in REFUSED)
print("loaded", loaded)
"""


def test_the_temporal_engine_imports_without_procrastinate_or_psycopg(tmp_path: Path) -> None:
    pytest.importorskip("temporalio")
    made = subprocess.run(
        [sys.executable, "-c", PROGRAM, f"sqlite:///{tmp_path / 'store.db'}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)},
    )
    assert made.returncode == 0, made.stderr[-3000:]
    assert "built neutral ok" in made.stdout
    assert "loaded []" in made.stdout
