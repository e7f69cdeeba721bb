"""Ids taskloom draws (a `Deferred` given none, here) have the form and the
randomness of `uuid4().hex`."""

from __future__ import annotations

import uuid

from taskloom import Deferred


def drawn_id() -> str:
    return Deferred("session").id


def test_a_drawn_id_is_a_version_4_uuid_in_hex() -> None:
    drawn = {drawn_id() for _ in range(2000)}
    assert len(drawn) == 2000
    for h in drawn:
        parsed = uuid.UUID(h)
        assert parsed.hex == h and len(h) == 32
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_every_free_bit_of_a_drawn_id_varies() -> None:
    # 122 random bits, as uuid4: none of them stuck, the six fixed ones fixed.
    ones = zeros = 0
    for _ in range(500):
        n = int(drawn_id(), 16)
        ones |= n
        zeros |= ~n & ((1 << 128) - 1)
    fixed = (0xC000 << 48) | (0xF000 << 64)
    assert ones & zeros == ((1 << 128) - 1) & ~fixed
