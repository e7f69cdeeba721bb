"""Two real processes editing one memory item 1,000 times each lose no edit.

Each edit reads the item, appends its own id to the JSON list it holds and
puts it back with `if_version=` the version it read, redoing the edit on
`VersionConflict`. Afterwards the list holds every edit exactly once and the
version counts them all, on SQLite (one file) and PostgreSQL (one schema).
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter

import pytest

from pg import open_durable, pg_schema  # noqa: F401 (pg_schema: store_url's PostgreSQL side)
from taskloom.backends import backend_of, open_backend
from taskloom.testing.memory_contract import edit_from_processes

EDITS = 1_000


@pytest.mark.slow
async def test_two_processes_editing_one_item_apply_every_edit_exactly_once(
    store_url: tuple[str, str],
) -> None:
    url, schema = store_url
    options = {} if schema == "-" else {"schema": schema}
    backend = backend_of(open_durable(url, schema))
    assert backend is not None and backend.memory is not None
    memory = backend.memory
    try:
        await memory.put(("race",), "shared", [])
        factory = functools.partial(open_backend, url, **options)
        conflicts = await asyncio.to_thread(edit_from_processes, factory, "shared", 2, EDITS)
        print(f"{url.split(':')[0]}: version conflicts per process {conflicts}")
        item = await memory.get(("race",), "shared")
        assert item is not None
        counts = Counter(item.value)
        wanted = {f"p{i}-{n}" for i in range(2) for n in range(EDITS)}
        lost = sorted(wanted - set(counts))
        twice = sorted(edit for edit, times in counts.items() if times > 1)
        assert not lost and not twice, f"{len(lost)} edits lost, {len(twice)} applied twice"
        assert set(counts) == wanted
        assert item.version == 2 * EDITS + 1
        # The edits really overlapped: some were refused and redone.
        assert sum(conflicts) > 0
    finally:
        await backend.close()
