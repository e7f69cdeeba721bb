"""A partition, not a kill: a worker in its own network namespace reaches
PostgreSQL over a veth link the test cuts mid-run. Another worker takes the
run over; once the link is back, the cut-off worker (still alive, its
fencing generation stale) appends nothing, and the run ends exactly once."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from queue_support import Workers, host_runtime, log_problems, marks, tool_results, worker_env

from pg import PG_DSN, requires_postgres
from taskloom import RunStatus
from taskloom.entries import RunFinishedEntry, RunStartedEntry
from taskloom.log import INTERRUPTED

pytestmark = [requires_postgres, pytest.mark.slow]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


class Link:
    """A network namespace joined to this one by a veth pair, and a TCP relay on
    this side's address to the local PostgreSQL (which listens on loopback only)."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}"
        self.netns = f"tlq{tag}"
        self.outside, self.inside = f"tlqh{tag}", f"tlqn{tag}"
        octet = random.randrange(16, 240)
        self.host_ip, self.ns_ip = f"10.213.{octet}.1", f"10.213.{octet}.2"
        ip("netns", "add", self.netns)
        try:
            ip("link", "add", self.outside, "type", "veth", "peer", "name", self.inside)
            ip("link", "set", self.inside, "netns", self.netns)
            ip("addr", "add", f"{self.host_ip}/30", "dev", self.outside)
            ip("link", "set", self.outside, "up")
            ip(
                "netns",
                "exec",
                self.netns,
                "ip",
                "addr",
                "add",
                f"{self.ns_ip}/30",
                "dev",
                self.inside,
            )
            ip("netns", "exec", self.netns, "ip", "link", "set", self.inside, "up")
            ip("netns", "exec", self.netns, "ip", "link", "set", "lo", "up")
        except BaseException:
            self.remove()
            raise
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._relay, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def _relay(self, ready: threading.Event) -> None:
        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                pr, pw = await asyncio.open_connection("127.0.0.1", 5432)
            except OSError:
                w.close()
                return
            await asyncio.gather(pipe(r, pw), pipe(pr, w))

        async def main() -> None:
            server = await asyncio.start_server(serve, self.host_ip, 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            async with server:
                await server.serve_forever()

        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(main())
        except RuntimeError:
            pass  # stopped

    def url(self) -> str:
        return PG_DSN.replace("127.0.0.1:5432", f"{self.host_ip}:{self.port}")

    def cut(self) -> None:
        ip("link", "set", self.outside, "down")

    def restore(self) -> None:
        ip("link", "set", self.outside, "up")

    def remove(self) -> None:
        subprocess.run(["ip", "link", "del", self.outside], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=10)
        loop = getattr(self, "loop", None)
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            self.thread.join(timeout=10)


def namespaces_unavailable() -> str | None:
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"tlqprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` is not permitted here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@pytest.fixture
def link() -> Iterator[Link]:
    reason = namespaces_unavailable()
    if reason is not None:
        pytest.skip(f"no network namespace for the partition test: {reason}")
    made = Link()
    yield made
    made.remove()


def until(check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


async def test_a_partitioned_worker_appends_nothing_after_the_takeover(
    link: Link, pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = tmp_path / "effects.txt"
    monkeypatch.setenv("TLQ_EFFECTS", str(effects))
    env = worker_env(PG_DSN, pg_schema, effects, TLQ_LEASE_TTL="3")
    pool = Workers(env)
    host = host_runtime(PG_DSN, pg_schema)
    try:
        session = await host.create_session(host.agent_named("bot"))
        cut_off = pool.start(
            concurrency=1,
            prefix=["ip", "netns", "exec", link.netns],
            TLQ_URL=link.url(),
            TLQ_TOOL_SLEEP="4",
        )
        await session.submit("across the partition")
        cut_off.expect(f"TOOL {session.id}")
        link.cut()
        taker = pool.start(concurrency=1)
        result = await session.wait(timeout=90)
        assert result.status is RunStatus.COMPLETED
        assert result.text == f"done by {taker.pid}: across the partition"
        at_takeover = len(await session.entries())
        link.restore()
        # The cut-off worker finishes its tool, then tries to write: refused.
        ended = ("(taskloom.run) goes back in the queue", "(taskloom.run) failed:")
        until(lambda: any(line in cut_off.stderr() for line in ended), 120)
        assert "is stale" in cut_off.stderr()  # its write was refused by the fence
        entries = await session.entries()
        assert len(entries) == at_takeover  # nothing appended after the takeover
        runs = [e.run_id for e in entries if isinstance(e.payload, RunStartedEntry)]
        assert len(runs) == 2  # the cut-off run, and the one that took over
        first_of_taker = next(e.position for e in entries if e.run_id == runs[1])
        assert all(e.position < first_of_taker for e in entries if e.run_id == runs[0])
        ends = [e for e in entries if isinstance(e.payload, RunFinishedEntry)]
        assert len(ends) == 1 and ends[0].run_id == runs[1]
        assert log_problems(entries) == []
        assert list(tool_results(entries).values()) == [[INTERRUPTED]]
        assert len(marks(effects)) == 1
        print(f"partition: takeover at position {first_of_taker}, cut-off worker refused")
    finally:
        pool.close()
        await host.close()
