"""How the loop signals the end of a run internally."""

from __future__ import annotations

from ..results import RunStatus

__all__ = ["EndRun"]


class EndRun(Exception):
    """Raised inside the loop: the run ends here with `status` (a value, not a
    failure). Watches (`RunObserver`) may see it pass through their
    `__exit__`, and should tell it apart from an error."""

    def __init__(self, status: RunStatus, error: str | None = None) -> None:
        super().__init__(status.value)
        self.status = status
        self.error = error
