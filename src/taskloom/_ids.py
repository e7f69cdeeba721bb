"""Random identifiers in the form `uuid.uuid4().hex` has, without importing
`uuid` (which imports `platform` and probes the system at import: about 1% of
`import taskloom`, for ids that only need 122 random bits)."""

from __future__ import annotations

import os

# The bits `uuid.UUID(version=4)` sets: the RFC 4122 variant and version 4.
_CLEAR = ~((0xC000 << 48) | (0xF000 << 64))
_SET = (0x8000 << 48) | (4 << 76)


def uuid4_hex() -> str:
    """32 lowercase hex digits of a random version-4 UUID, as `uuid.uuid4().hex`."""
    return f"{(int.from_bytes(os.urandom(16), 'big') & _CLEAR) | _SET:032x}"
