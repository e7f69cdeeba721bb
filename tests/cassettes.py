"""Loading the recorded provider traffic in tests/corpora and serving it.

`load(folder)` yields `Cassette`s; `transport_for(interaction)` answers every
request with that interaction's recorded response through a
`taskloom.testing.transport.RecordingTransport`, recording what was sent so tests can
compare it with the recorded request.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from taskloom.testing.transport import CannedResponse, RecordingTransport

CORPUS = Path(__file__).resolve().parent / "corpora" / "pydantic-ai-cassettes"


@dataclass
class Interaction:
    """One recorded request and its response."""

    uri: str
    request_body: Any
    status: int
    headers: dict[str, str]
    json_body: Any = None
    text_body: str | None = None
    request_text: str | None = None  # the request body as recorded, when not parsed

    @property
    def is_stream(self) -> bool:
        return self.text_body is not None and (
            "text/event-stream" in self.headers.get("content-type", "")
            or self.text_body.lstrip().startswith(("data:", "event:"))
        )


@dataclass
class Cassette:
    """A recorded test: its name and interactions."""

    path: Path
    interactions: list[Interaction] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.stem


def _headers(raw: dict[str, list[str]] | None) -> dict[str, str]:
    return {k.lower(): v[0] if isinstance(v, list) else str(v) for k, v in (raw or {}).items()}


def _text(raw: Any) -> str | None:
    if raw is None:
        return None
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def load(folder: str) -> Iterator[Cassette]:
    """Every cassette in a corpus folder, sorted by name."""
    if not (CORPUS / folder).is_dir():
        # The corpus is part of the repository: a missing folder is an error, not an empty run.
        raise FileNotFoundError(f"no corpus folder {CORPUS / folder}")
    for path in sorted((CORPUS / folder).glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        cassette = Cassette(path)
        for item in data.get("interactions", []):
            req, resp = item["request"], item["response"]
            body = resp.get("body") or {}
            cassette.interactions.append(
                Interaction(
                    uri=req.get("uri", ""),
                    request_body=req.get("parsed_body"),
                    status=resp["status"]["code"],
                    headers=_headers(resp.get("headers")),
                    json_body=resp.get("parsed_body"),
                    text_body=_text(body.get("string")) if isinstance(body, dict) else None,
                    request_text=_text(req.get("body")),
                )
            )
        yield cassette


def transport_for(interaction: Interaction) -> RecordingTransport:
    """A transport answering every request with the interaction's recorded response."""
    i = interaction
    if i.json_body is not None:
        return RecordingTransport(default=RecordingTransport.json(i.json_body, status=i.status))
    ctype = (
        "text/event-stream" if i.is_stream else i.headers.get("content-type", "application/json")
    )
    content = (i.text_body or "").encode()
    return RecordingTransport(default=CannedResponse(i.status, content, {"content-type": ctype}))


# Counts reported at the end of the test run (conftest's terminal summary):
# replayed interactions per API, and skipped cassettes with their reason.
REPLAYED: dict[str, int] = {}
SKIPPED: dict[str, dict[str, str]] = {}


def count_replayed(api: str, n: int = 1) -> None:
    """Record that `n` interactions of `api` were replayed and checked."""
    REPLAYED[api] = REPLAYED.get(api, 0) + n


def note_skipped(api: str, cassette: str, reason: str) -> None:
    """Record a cassette left out of the replay, with the reason."""
    SKIPPED.setdefault(api, {})[cassette] = reason
