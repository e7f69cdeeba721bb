"""`Backend`: one database's parts, and what it can do (`Capability`).

A backend is everything taskloom keeps in one database: the session store,
the leases (with fences) that coordinate its writers, the activity registry
and notice inbox of background work, and the snapshot rows beside the log.
The built-in ones (`MemoryBackend`, `SQLiteBackend`, `PostgresBackend`) build
every part on one database object, so a fenced append checks its lease in
its own transaction and a PostgreSQL backend holds one pool.
"""

from __future__ import annotations

import contextlib
import enum
import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ._activities import ActivityRegistry, NoticeInbox
    from ._leases import Clock, Leases
    from ._ledgers import BudgetLedger
    from ._memories import Memories
    from ._semantic import Embedder
    from ._snapshots import SnapshotStore
    from ._store import SessionStore


class Capability(enum.StrEnum):
    """What a backend promises; the contract suites in `taskloom.testing`
    run the tests of each capability a backend declares, and skip the rest
    with the reason."""

    SPANS_PROCESSES = "spans_processes"
    """Several processes (and a reopened instance) see the same data."""
    FENCED_APPENDS = "fenced_appends"
    """`append(..., fence=)` refuses a stale lease generation in the append's own transaction."""
    SNAPSHOTS = "snapshots"
    """Snapshot rows beside the log (`Backend.snapshots`)."""
    ACTIVITY_REGISTRY = "activity_registry"
    """A background `ActivityRegistry` on the same database."""
    NOTICE_INBOX = "notice_inbox"
    """A background `NoticeInbox` on the same database."""
    TREE_BUDGETS = "tree_budgets"
    """A `BudgetLedger` on the same database (`Backend.budgets`)."""
    MEMORY = "memory"
    """A long-term `Memories` on the same database (`Backend.memory`)."""


class Backend:
    """One database's session store, leases, activity registry, notice inbox,
    snapshots, tree budgets and long-term memory, with the capabilities it declares.

    Build one around your own store to run taskloom on it:
    `Backend(store, registry=..., inbox=..., capabilities={...})`; parts left
    out are None (background work then keeps its registry and inbox in
    process memory; sessions open by full replay), and `leases` defaults to
    `store.leases`. The built-in backends build every part on one database
    object. A backend sets `store.backend` to itself unless the store has
    one: that is how `BackgroundService.for_store` finds the rest.

    `close()` closes the store, and with it the database every part shares.
    """

    def __init__(
        self,
        store: SessionStore,
        *,
        leases: Leases | None = None,
        registry: ActivityRegistry | None = None,
        inbox: NoticeInbox | None = None,
        snapshots: SnapshotStore | None = None,
        budgets: BudgetLedger | None = None,
        memory: Memories | None = None,
        capabilities: Iterable[Capability | str] = (),
    ) -> None:
        self.store = store
        self.leases: Leases = leases if leases is not None else store.leases
        self._registry = registry
        self._inbox = inbox
        self._snapshots = snapshots
        self._budgets = budgets
        self._memory = memory
        self.capabilities: frozenset[Capability] = frozenset(
            Capability(flag) for flag in capabilities
        )
        if getattr(store, "backend", None) is None:
            with contextlib.suppress(AttributeError):  # a store with slots keeps none
                setattr(store, "backend", self)  # noqa: B010 (not in the protocol)

    def supports(self, capability: Capability | str) -> bool:
        """Whether this backend declares `capability`."""
        return Capability(capability) in self.capabilities

    @property
    def registry(self) -> ActivityRegistry | None:
        """The activity registry of background work on this backend, if it has one."""
        return self._registry

    @property
    def inbox(self) -> NoticeInbox | None:
        """The notice inbox of background work on this backend, if it has one."""
        return self._inbox

    @property
    def snapshots(self) -> SnapshotStore | None:
        """The snapshot rows beside the log, or None: sessions then open by full replay."""
        return self._snapshots

    @property
    def budgets(self) -> BudgetLedger | None:
        """The tree budgets on this backend's database, or None: a runtime then
        keeps them in its own memory, and a tree's ceiling holds in one process."""
        return self._budgets

    @property
    def memory(self) -> Memories | None:
        """The long-term memory on this backend's database, or None if it has none."""
        return self._memory

    async def close(self) -> None:
        """Close the store (and the database every part shares). Idempotent."""
        close = getattr(self.store, "close", None)
        if close is not None:
            await close()

    def __repr__(self) -> str:
        flags = ", ".join(sorted(self.capabilities))
        return f"<{type(self).__name__} {type(self.store).__name__} [{flags}]>"


class DatabaseBackend(Backend):
    """A backend whose parts share its `database`: the store and its leases
    are built with it, the others (`part_types`) on first use, so that a
    part's tables are made only once it is used."""

    database: Any
    _clock: Clock
    part_types: ClassVar[tuple[Any, Any, Any, Any]]
    """The registry, inbox, snapshots and budgets classes, each built on `database`."""
    memory_type: ClassVar[Any]
    """The `Memories` class built on `database` (with the backend's clock and embedder)."""
    # Given to `memory` when it is built (the backend's `embedder=` option).
    _embedder: Embedder | None = None

    @functools.cached_property
    def registry(self) -> ActivityRegistry:
        """The activity registry on this backend's database."""
        return self.part_types[0](self.database, clock=self._clock)  # type: ignore[no-any-return]

    @functools.cached_property
    def inbox(self) -> NoticeInbox:
        """The notice inbox on this backend's database."""
        return self.part_types[1](self.database)  # type: ignore[no-any-return]

    @functools.cached_property
    def snapshots(self) -> SnapshotStore:
        """The snapshot rows on this backend's database."""
        return self.part_types[2](self.database)  # type: ignore[no-any-return]

    @functools.cached_property
    def budgets(self) -> BudgetLedger:
        """The tree budgets on this backend's database."""
        return self.part_types[3](self.database)  # type: ignore[no-any-return]

    @functools.cached_property
    def memory(self) -> Memories:
        """The long-term memory on this backend's database."""
        return self.memory_type(  # type: ignore[no-any-return]
            self.database, clock=self._clock, embedder=self._embedder
        )


def backend_of(store: object) -> Backend | None:
    """The backend `store` belongs to (`store.backend`), or None for a store without one."""
    backend = getattr(store, "backend", None)
    return backend if isinstance(backend, Backend) else None


def snapshots_for(store: SessionStore) -> SnapshotStore | None:
    """The snapshot rows beside `store` (on its backend's database), or None
    for a store with no backend: its sessions then open by full replay."""
    backend = backend_of(store)
    return backend.snapshots if backend is not None else None
