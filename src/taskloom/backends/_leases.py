"""Leases with fencing tokens.

A lease gives one holder a key for a while. Every acquisition after the
previous lease lapsed (or was released) bumps the key's `generation`; writes
made on behalf of a holder carry `Fence(key, generation)` and a store refuses
them once a newer generation exists. A worker that stalls past its lease and
wakes up therefore cannot write over its successor.

Time comes from an injectable clock so tests never sleep for expiry.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..errors import StaleLeaseError

Clock = Callable[[], float]


def system_clock() -> float:
    """Wall-clock seconds (leases are shared between processes)."""
    return time.time()


@dataclass(frozen=True, slots=True)
class Fence:
    """A lease key and the generation its holder was granted."""

    key: str
    generation: int


def check_fence(fence: Fence | None, current: int) -> None:
    """Raise `StaleLeaseError` unless `fence` is None or `current` (the key's
    newest generation, 0 if never leased) is its generation."""
    if fence is not None and current != fence.generation:
        raise StaleLeaseError(
            f"lease {fence.key!r} generation {fence.generation} is stale (current {current})"
        )


@dataclass(frozen=True, slots=True)
class Lease:
    """A granted lease: who holds `key`, under which generation, until when."""

    key: str
    holder: str
    generation: int
    expires_at: float

    @property
    def fence(self) -> Fence:
        """The fencing token every write of this holder carries."""
        return Fence(self.key, self.generation)


@runtime_checkable
class Leases(Protocol):
    """Time-limited exclusive ownership of keys, with fencing generations."""

    async def acquire(self, key: str, holder: str, ttl: float) -> Lease | None:
        """Take the key if it is free or its lease lapsed; None if someone holds it."""
        ...

    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        """Extend a lease still held under the same generation; None if lost."""
        ...

    async def release(self, lease: Lease) -> None:
        """Give the key up (no effect if the lease was already lost)."""
        ...

    async def take_over(self, lease: Lease, holder: str, ttl: float) -> Lease | None:
        """Take the key from `lease`'s holder, known to be dead, before its
        lease lapses: succeeds (with a new generation) only while `lease` is
        still the current one; None otherwise."""
        ...

    async def current(self, key: str) -> Lease | None:
        """The live lease on the key, if any."""
        ...


class MemoryLeases:
    """In-process leases; `generation(key)` is read by `MemoryStore` for fencing."""

    def __init__(self, clock: Clock = system_clock) -> None:
        self._clock = clock
        self._leases: dict[str, Lease] = {}
        self._generations: dict[str, int] = {}

    def forget(self, key: str) -> None:
        """Drop a key nobody holds and nobody will write under again (its
        session was deleted), so a long-lived process keeps no trace of it."""
        if key not in self._leases:
            self._generations.pop(key, None)

    def generation(self, key: str) -> int:
        """The newest generation ever granted for the key (0 if none)."""
        return self._generations.get(key, 0)

    async def acquire(self, key: str, holder: str, ttl: float) -> Lease | None:
        now = self._clock()
        held = self._leases.get(key)
        if held is not None and held.expires_at > now:
            return None
        generation = self._generations.get(key, 0) + 1
        self._generations[key] = generation
        lease = Lease(key, holder, generation, now + ttl)
        self._leases[key] = lease
        return lease

    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        now = self._clock()
        held = self._leases.get(lease.key)
        if held is None or held.generation != lease.generation or held.expires_at <= now:
            return None
        renewed = Lease(lease.key, lease.holder, lease.generation, now + ttl)
        self._leases[lease.key] = renewed
        return renewed

    async def release(self, lease: Lease) -> None:
        held = self._leases.get(lease.key)
        if held is not None and held.generation == lease.generation:
            del self._leases[lease.key]

    async def take_over(self, lease: Lease, holder: str, ttl: float) -> Lease | None:
        held = self._leases.get(lease.key)
        if held is None or held.generation != lease.generation or held.holder != lease.holder:
            return None
        generation = self._generations[lease.key] + 1
        self._generations[lease.key] = generation
        taken = Lease(lease.key, holder, generation, self._clock() + ttl)
        self._leases[lease.key] = taken
        return taken

    async def current(self, key: str) -> Lease | None:
        held = self._leases.get(key)
        if held is None or held.expires_at <= self._clock():
            return None
        return held


# ---------------------------------------------------------------- holders

_HOLDER_PREFIX = "proc"


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return None


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot; None if it is gone
    or a zombie (killed but not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields[19]


_IDENTITY: tuple[int, str] | None = None
_HOLDS = itertools.count(1)


def _process_identity() -> str:
    """This process's identity prefix, computed once per pid (a fork gets its
    own), ending in a random token of the process's life."""
    global _IDENTITY
    pid = os.getpid()
    if _IDENTITY is None or _IDENTITY[0] != pid:
        boot, ns, started = _boot_id(), _pid_namespace(), _start_time(pid)
        token = os.urandom(4).hex()  # as secrets.token_hex(4), without importing secrets
        if boot is None or ns is None or started is None:
            ident = f"{socket.gethostname()}-{pid}-{token}"
        else:
            ident = f"{_HOLDER_PREFIX}:{boot}:{ns}:{pid}:{started}:{token}"
        _IDENTITY = (pid, ident)
    return _IDENTITY[1]


def holder_name(tag: str = "") -> str:
    """A lease holder name that identifies this process on this machine.

    On Linux it carries the boot id, the pid namespace, the pid and the
    process's start time, so another process on the same machine can tell
    for certain that the holder is gone (`holder_is_gone`). Elsewhere it is
    only unique, and a dead holder's lease lapses at its expiry.
    """
    suffix = f"-{tag}" if tag else ""
    # Unique per hold: the process's token and a counter (no system call a hold).
    return f"{_process_identity()}.{next(_HOLDS)}{suffix}"


def holder_is_gone(holder: str) -> bool:
    """True only when `holder` names a process of this machine (same boot,
    same pid namespace) that no longer runs: its pid is gone, a zombie, or
    now a different process. Anything else (another machine, an older name
    format) is False: its lease must lapse on its own."""
    parts = holder.split(":")
    if len(parts) < 6 or parts[0] != _HOLDER_PREFIX:
        return False
    _, boot, ns, pid, started = parts[:5]
    if boot != _boot_id() or ns != _pid_namespace() or not pid.isdigit():
        return False
    return _start_time(int(pid)) != started


def session_lease_key(session_id: str) -> str:
    """The lease whoever runs the session holds (a run, a resume, a child's
    runner, the follower of remote work)."""
    return f"session:{session_id}"


async def acquire_or_take_over(
    leases: Leases, key: str, ttl: float, *, ended: str | None = None
) -> Lease | None:
    """Lease `key` for `ttl` seconds for this process: free, or held by a
    process of this machine known to be dead (taken over at once); None
    while a live holder (or one that cannot be told dead) holds it. The one
    take-over rule of sessions and of the work followed as child sessions.

    `ended` names a hold of this process that is over although its release
    may not have landed (a busy or silent store): it is taken over at once
    too, under a new generation, so nothing of the old hold writes after it.
    A name of another process is never taken over this way."""
    me = holder_name()
    lease = await leases.acquire(key, me, ttl)
    if lease is not None:
        return lease
    current = await leases.current(key)
    if current is None:
        return await leases.acquire(key, me, ttl)  # released between the two calls
    ours = ended is not None and ended.startswith(f"{_process_identity()}.")
    if (ours and current.holder == ended) or holder_is_gone(current.holder):
        return await leases.take_over(current, me, ttl)
    return None
