"""How a run ends: the value its steps return (`End`), and the exception
(`EndRun`) for an end found deep inside a step."""

from __future__ import annotations

from typing import NamedTuple

from ..results import RunStatus


class End(NamedTuple):
    """The end of a run, as a step of the loop returns it (None: go on):
    its `status` and, for some, why (`error`)."""

    status: RunStatus
    error: str | None = None


class EndRun(Exception):
    """Raised inside a step that cannot return (a model request, a tool
    batch): the run ends there, as `end` says (a value, not a failure).
    Watches (`RunObserver`) may see it pass through their `__exit__`, and
    should tell it apart from an error."""

    def __init__(self, status: RunStatus, error: str | None = None) -> None:
        super().__init__(status.value)
        self.end = End(status, error)
