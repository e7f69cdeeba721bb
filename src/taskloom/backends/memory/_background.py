"""In-process activity registry and notice inbox: the reference implementations.

Every method runs without awaiting anything, so on one event loop each call
is atomic: that alone makes caps and first-writer-wins hold under any number
of concurrent tasks. Nothing survives the process.
"""

from __future__ import annotations

from builtins import list as _list
from collections.abc import Iterable
from dataclasses import dataclass

from .._activities import BackgroundActivity, BackgroundNotice
from .._leases import Clock, system_clock


@dataclass(slots=True)
class _Held:
    activity: BackgroundActivity
    expires_at: float


class MemoryActivityRegistry:
    """An `ActivityRegistry` in a dict; `clock` (seconds) measures leases."""

    def __init__(self, *, clock: Clock = system_clock) -> None:
        self._clock = clock
        self._sessions: dict[str, dict[str, _Held]] = {}

    def _live(self, session: str) -> dict[str, _Held]:
        held = self._sessions.get(session)
        if held is None:
            return {}
        now = self._clock()
        for activity_id in [k for k, h in held.items() if h.expires_at <= now]:
            del held[activity_id]
        return held

    async def add(
        self, session: str, activity: BackgroundActivity, lease: float, kind_cap: int | None = None
    ) -> bool:
        held = self._live(session)
        if kind_cap is not None:
            taken = sum(
                1 for k, h in held.items() if h.activity.kind == activity.kind and k != activity.id
            )
            if taken >= kind_cap:
                return False
        expires_at = self._clock() + lease
        entry = held.get(activity.id)
        if entry is None:
            self._sessions.setdefault(session, {})[activity.id] = _Held(activity, expires_at)
        else:
            # Updated in place: a replaced activity keeps its place in `list`.
            entry.activity, entry.expires_at = activity, expires_at
        return True

    async def list(self, session: str) -> _list[BackgroundActivity]:
        return [h.activity for h in self._live(session).values()]

    async def renew(self, session: str, activity_id: str, lease: float) -> bool:
        entry = self._live(session).get(activity_id)
        if entry is None:
            return False
        entry.expires_at = self._clock() + lease
        return True

    async def remove(self, session: str, activity_id: str) -> None:
        held = self._sessions.get(session)
        if held is not None:
            held.pop(activity_id, None)

    async def clear(self, session: str) -> None:
        self._sessions.pop(session, None)


@dataclass(slots=True)
class _Box:
    # Ids ever pushed stay in `known` after their ack: that is what keeps a
    # report redelivered after the model saw it from landing a second time.
    known: set[str]
    unacked: dict[str, BackgroundNotice]


class MemoryNoticeInbox:
    """A `NoticeInbox` in a dict; `pending` costs O(unacknowledged notices)."""

    def __init__(self) -> None:
        self._boxes: dict[str, _Box] = {}

    async def push(self, session: str, notice: BackgroundNotice) -> bool:
        box = self._boxes.get(session)
        if box is None:
            box = self._boxes[session] = _Box(set(), {})
        if notice.id in box.known:
            return False
        box.known.add(notice.id)
        box.unacked[notice.id] = notice
        return True

    async def pending(self, session: str) -> _list[BackgroundNotice]:
        box = self._boxes.get(session)
        return _list(box.unacked.values()) if box is not None else []

    async def ack(self, session: str, ids: Iterable[str]) -> None:
        box = self._boxes.get(session)
        if box is not None:
            for notice_id in ids:
                box.unacked.pop(notice_id, None)

    async def clear(self, session: str) -> None:
        self._boxes.pop(session, None)
