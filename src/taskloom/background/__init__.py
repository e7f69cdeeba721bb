"""Background work: leases, activity registry, notice inbox, lifecycle, run notices."""

from __future__ import annotations

from .leases import Clock, Lease, Leases, MemoryLeases, system_clock

__all__ = ["Clock", "Lease", "Leases", "MemoryLeases", "system_clock"]
