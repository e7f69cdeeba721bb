"""What earlier versions stored still reads as it did, and is written the same.

`fixtures/stored_v1.json` was written by a SQLite backend (through
`fixtures/make_stored_v1.py`) before entries, messages and background
records were encoded by one codec: an entry of every kind, a message of
every block kind, activity and notice records, every field set.
"""

from __future__ import annotations

import json
from pathlib import Path

from stored_values import ACTIVITIES, ENTRIES, MESSAGES, NOTICES
from taskloom.backends import BackgroundActivity, BackgroundNotice
from taskloom.entries import Entry, EntryKind
from taskloom.messages import Message

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "stored_v1.json").read_text("utf-8"))


def test_the_fixture_has_an_entry_of_every_kind() -> None:
    kinds = {v for k, v in vars(EntryKind).items() if k.isupper()}
    assert {e["kind"] for e in FIXTURE["entries"]} == kinds


def test_stored_entries_read_as_written_and_write_the_same() -> None:
    assert len(FIXTURE["entries"]) == len(ENTRIES)
    for stored, original in zip(FIXTURE["entries"], ENTRIES, strict=True):
        entry = Entry(stored["kind"], stored["data"])
        assert entry.payload == original
        again = Entry.of(original)
        assert again.kind == stored["kind"]
        assert json.loads(json.dumps(again.data)) == stored["data"]


def test_stored_messages_read_as_written_and_write_the_same() -> None:
    for stored, original in zip(FIXTURE["messages"], MESSAGES, strict=True):
        assert Message.from_dict(stored) == original
        assert json.loads(json.dumps(original.to_dict())) == stored
    kinds = {b["type"] for m in FIXTURE["messages"] for b in m["blocks"]}
    assert kinds == {"text", "thinking", "tool_call", "tool_result", "image", "compaction"}


def test_stored_background_records_read_as_written_and_write_the_same() -> None:
    by_id = {a["id"]: a for a in FIXTURE["activities"]}
    for original in ACTIVITIES:
        assert BackgroundActivity.from_dict(by_id[original.id]) == original
        assert json.loads(json.dumps(original.to_dict())) == by_id[original.id]
    for stored, notice in zip(FIXTURE["notices"], NOTICES, strict=True):
        assert BackgroundNotice.from_dict(stored) == notice
        assert json.loads(json.dumps(notice.to_dict())) == stored
