"""A worker counts a session's wake-ups in a row from the entries it holds, as
the whole log would count them, or says it cannot tell."""

from __future__ import annotations

import random

from taskloom.distributed._bodies import recent_wakeups, wakeups_in_a_row
from taskloom.entries import Entry, MessageEntry, RunStartedEntry, Steer
from taskloom.messages import Message


def _log(rng: random.Random, length: int) -> list[Entry]:
    entries: list[Entry] = []
    steers: list[int] = []
    for position in range(1, length + 1):
        roll = rng.random()
        if roll < 0.15:
            payload: object = Steer("more")
            steers.append(position)
        elif roll < 0.3:
            # A user turn folding some earlier entries: steering or not.
            earlier = rng.sample(range(1, position), k=min(position - 1, rng.randint(0, 2)))
            if steers and rng.random() < 0.3:
                earlier.append(rng.choice(steers))
            payload = MessageEntry(Message.user("hi"), folds=tuple(sorted(set(earlier))))
        elif roll < 0.6:
            payload = RunStartedEntry("a", resume=rng.random() < 0.2)
        else:
            payload = MessageEntry(Message.assistant("ok"))
        entries.append(Entry(payload.KIND, payload.to_data(), None, position, 1.0))  # type: ignore[attr-defined]
    return entries


def test_the_entries_held_count_as_the_whole_log_or_say_they_cannot() -> None:
    rng = random.Random(40)
    told = 0
    for _ in range(300):
        entries = _log(rng, rng.randint(1, 40))
        for base in range(len(entries)):
            for cap in (1, 3, 100):
                whole = wakeups_in_a_row(entries)
                recent = recent_wakeups(entries[base:], base, cap)
                if recent is not None:
                    told += 1
                    assert recent == min(whole, cap) or (recent >= cap and whole >= cap)
                elif base == 0:
                    raise AssertionError("a whole log always tells")
    assert told > 1000


def test_a_user_turn_folding_an_entry_before_those_held_cannot_be_told() -> None:
    steer = Entry(Steer.KIND, Steer("x").to_data(), None, 3, 1.0)
    turn = MessageEntry(Message.user("x"), folds=(3,))
    run = RunStartedEntry("a")
    held = [
        Entry(turn.KIND, turn.to_data(), None, 6, 1.0),
        Entry(run.KIND, run.to_data(), None, 7, 1.0),
    ]
    assert recent_wakeups(held, 5, 8) is None
    # With the steer among the entries held, the turn is a user turn.
    full = [steer, *held]
    assert recent_wakeups(full, 2, 8) == 1 == wakeups_in_a_row(full)
