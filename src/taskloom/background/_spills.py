"""Where background commands' full output goes, and when it is removed.

A spill file may hold whatever the command printed, secrets included, so it
is private to this user and removed when its session is deleted, or once
older than the retention period.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
import weakref
from pathlib import Path

_SWEEP_SECONDS = 60.0
"""The least time between two looks for spill files past their retention."""


class SpillFiles:
    """The spill files of one tool set, by owner (a runtime's service) and session,
    in `folder` (None: a private temporary folder), named `{activity id}.log`;
    only files `name` matches are ever removed. `retention`: seconds a file may
    stay (None: until its session is deleted)."""

    def __init__(self, folder: Path | None, retention: float | None, name: re.Pattern[str]) -> None:
        self._folder = folder
        self._retention = retention
        self._name = name
        self._swept_at: float | None = None
        # Weak: a tool set outlives the runtimes it serves.
        self._written: weakref.WeakKeyDictionary[object, dict[str, set[Path]]] = (
            weakref.WeakKeyDictionary()
        )

    def path(self, owner: object, session_id: str, activity_id: str) -> Path:
        """The file for one command's output, remembered as the session's."""
        if self._folder is None:
            # Made on first use, private to this user: output may hold secrets.
            self._folder = Path(tempfile.mkdtemp(prefix="taskloom-background-"))
        path = self._folder / f"{activity_id}.log"
        self._written.setdefault(owner, {}).setdefault(session_id, set()).add(path)
        return path

    def remove_session(self, owner: object, session_id: str) -> None:
        """Remove the files the session's commands wrote through this tool set."""
        for path in self._written.get(owner, {}).pop(session_id, set()):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def sweep(self) -> None:
        """Remove the files older than the retention (looking at most once a minute)."""
        now = time.time()
        if self._retention is None or self._folder is None:
            return
        if self._swept_at is not None and now - self._swept_at < _SWEEP_SECONDS:
            return
        self._swept_at = now
        cutoff = now - self._retention
        try:
            entries = list(os.scandir(self._folder))
        except OSError:
            return  # not made yet, or unreadable: nothing of ours to remove
        for entry in entries:
            if not self._name.fullmatch(entry.name):
                continue
            with contextlib.suppress(OSError):  # another process may remove it first
                if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
        for sessions in self._written.values():
            for session_id, paths in list(sessions.items()):
                paths.difference_update([p for p in paths if not p.exists()])
                if not paths:
                    del sessions[session_id]
