"""`SentenceTransformerEmbedder`: an `Embedder` over a sentence-transformers model."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ._semantic import check_embedder

__all__ = ["SentenceTransformerEmbedder"]


class SentenceTransformerEmbedder:
    """An `Embedder` over `model`, a loaded `sentence_transformers.SentenceTransformer`
    (the `embeddings` extra installs the library; the host loads the model,
    e.g. `SentenceTransformer("all-MiniLM-L6-v2")`, and chooses its device).

    `name` identifies the model in the stored vectors: give the same name
    for the same model in every process, and another for another model
    (vectors made under another name are never compared, but made again).
    `dimensions` is read from the model. `embed` runs the model on a worker
    thread, so the event loop goes on while it computes.
    """

    def __init__(self, model: object, *, name: str) -> None:
        self.model: Any = model
        self.name = name
        self.dimensions = _dimensions_of(model)
        check_embedder(self)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, from the model (run on a worker thread)."""
        return await asyncio.to_thread(self._encode, list(texts))

    def _encode(self, texts: list[str]) -> list[list[float]]:
        vectors = self.model.encode(texts, convert_to_numpy=True, show_progress_bar=False)
        return [[float(x) for x in vector] for vector in vectors]

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(name={self.name!r}, dimensions={self.dimensions})"


def _dimensions_of(model: object) -> int:
    # Newer sentence-transformers name it get_embedding_dimension, older ones
    # get_sentence_embedding_dimension: either release works.
    for method in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
        found = getattr(model, method, None)
        if callable(found):
            dimensions = found()
            if isinstance(dimensions, int) and dimensions > 0:
                return dimensions
    raise UsageError(
        f"SentenceTransformerEmbedder takes a loaded SentenceTransformer model whose "
        f"embedding dimension is known, not {type(model).__name__}"
    )
