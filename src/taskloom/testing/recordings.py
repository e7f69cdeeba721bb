"""Turn a real run into an offline test: record it once, replay it in CI.

    from taskloom.models import resolve_model
    from taskloom.testing.recordings import recorded_model

    async def test_the_agent_adds():
        with recorded_model("tests/recordings/adds.json",
                            lambda: resolve_model("openai:gpt-4.1-mini")) as model:
            result = await Agent("a", model, tools=[add]).run("what is 2+3?")
        assert result.text == "5"

With `TASKLOOM_RECORD=1` (or `record=True`) the test runs against the real
model and, when the block ends without an error, writes the exchanges to the
file (small JSON without keys, URLs or headers: commit it). Otherwise it
replays the file offline (`real` is never called); a request the recording
does not hold, or one left unasked, fails with `ReplayMismatch`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..models import Model, RecordingModel, ReplayModel

__all__ = ["RECORD_ENV", "recorded_model", "recording_wanted"]

RECORD_ENV = "TASKLOOM_RECORD"  # `1`, `true` or `yes` makes `recorded_model` record


def recording_wanted() -> bool:
    """Whether `TASKLOOM_RECORD` asks to record rather than replay."""
    return os.environ.get(RECORD_ENV, "").strip().lower() in ("1", "true", "yes")


@contextmanager
def recorded_model(
    path: str | Path, real: Callable[[], Model], *, record: bool | None = None
) -> Iterator[RecordingModel | ReplayModel]:
    """A model for one test: `real()` recorded into `path`, or `path` replayed
    (see the module docstring). `record` overrides the environment."""
    recording = recording_wanted() if record is None else record
    if recording:
        recorder = RecordingModel(real())
        yield recorder
        recorder.save(path)
        return
    if not Path(path).exists():
        raise FileNotFoundError(
            f"no recording at {path}: run this test once with {RECORD_ENV}=1 to make it"
        )
    replay = ReplayModel.load(path)
    yield replay
    replay.check_done()
