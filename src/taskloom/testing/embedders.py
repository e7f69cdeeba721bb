"""`HashingEmbedder`: a deterministic `Embedder` for tests, with no model behind it."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

__all__ = ["HashingEmbedder"]

_WORD = re.compile(r"[^\W_]+")


class HashingEmbedder:
    """An `Embedder` whose vector of a text counts its words (runs of letters
    and digits, case-folded) in `dimensions` buckets chosen by a hash of each word:
    texts sharing words are close, texts sharing none are orthogonal (but for
    hash collisions, which a large `dimensions` makes rare). The same text
    always gives the same vector, in every process.

    `calls` records the texts of each `embed` call, so a test can see what
    was embedded when. `name` defaults to one naming the dimensions:
    vectors of two instances with the same name are compared.
    """

    def __init__(self, dimensions: int = 256, *, name: str | None = None) -> None:
        self.dimensions = dimensions
        self.name = name or f"hashing-{dimensions}"
        self.calls: list[list[str]] = []

    def vector(self, text: str) -> list[float]:
        """The vector of `text` (what `embed` returns for it)."""
        vector = [0.0] * self.dimensions
        for word in _WORD.findall(text.casefold()):
            hashed = hashlib.blake2b(word.encode(), digest_size=8).digest()
            vector[int.from_bytes(hashed, "big") % self.dimensions] += 1.0
        return vector

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The vector of each text, in order (and the call recorded in `calls`)."""
        self.calls.append(list(texts))
        return [self.vector(text) for text in texts]
