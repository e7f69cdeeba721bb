"""`PoolOptions`: a server backend's pool and timeouts, said once for all its parts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from typing_extensions import Unpack

DEFAULT_MAX_SIZE = 10
"""Connections a backend's pool holds at most unless told otherwise.

One pool serves the store, the leases, the activity registry, the notice
inbox and the snapshots; one of its connections is kept for lease renewals."""


@dataclass(frozen=True, slots=True)
class PoolOptions:
    """How a server backend (PostgreSQL) reaches its database: one pool, every wait bounded.

    - `schema`: the PostgreSQL schema holding every taskloom table (created
      if missing), e.g. one per tenant or per test; None resolves tables
      through the connection's `search_path`;
    - `min_size`..`max_size`: the pool's connections (`max_size` defaults to
      `DEFAULT_MAX_SIZE`, 10); with 2 or more, one is kept for urgent work
      (lease renewals);
    - `connect_timeout`: seconds to connect before `StoreUnavailable`;
    - `checkout_timeout`: seconds to wait for a free pooled connection;
    - `statement_timeout`: the server's bound on each statement and open
      transaction, also enforced client-side shortly after; None leaves the
      server's settings;
    - `check_after_idle`: seconds a pooled connection may sit unused and
      still be handed out without a round trip to check it (half a second,
      as HikariCP's window); one idle longer is checked first. 0 checks at
      every checkout. Either way a connection whose socket already shows
      the server hung up is found out without a round trip.

    Invalid values raise `ValueError` at construction, before any I/O.
    """

    schema: str | None = None
    min_size: int = 1
    max_size: int = DEFAULT_MAX_SIZE
    connect_timeout: float = 5.0
    checkout_timeout: float = 10.0
    statement_timeout: float | None = 30.0
    check_after_idle: float = 0.5

    def __post_init__(self) -> None:
        if self.schema is not None and "\x00" in self.schema:
            raise ValueError(f"schema must be a name without NUL, not {self.schema!r}")
        for name in ("min_size", "max_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.min_size > self.max_size:
            raise ValueError(
                f"min_size ({self.min_size}) must not be more than max_size ({self.max_size})"
            )
        for name in ("connect_timeout", "checkout_timeout", "statement_timeout"):
            value = getattr(self, name)
            if value is None and name == "statement_timeout":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")

        value = self.check_after_idle
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise ValueError(f"check_after_idle must be 0 or more seconds, not {value!r}")

    def replace(self, **changes: Unpack[PoolSettings]) -> PoolOptions:
        """These options with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes) if changes else self


class PoolSettings(TypedDict, total=False):
    """`PoolOptions` fields as keyword arguments (`PostgresBackend(url, max_size=4)`)."""

    schema: str | None
    min_size: int
    max_size: int
    connect_timeout: float
    checkout_timeout: float
    statement_timeout: float | None
    check_after_idle: float
