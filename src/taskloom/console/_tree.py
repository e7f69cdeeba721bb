"""The delegation tree: children nested under the call that made them.

A child is found two ways, both public: the `subagent` link entry in its
parent's log (which names the call that created it) and the store's
`parent_id` index (which also finds a child whose link was never written,
e.g. its parent crashed in between). Each child's status comes from
`taskloom.delegation.child_status` — its own log plus its lease.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..backends import SessionMeta
from ..delegation import child_status
from ..entries import Entry, MessageEntry, SubagentLink, SubagentResult, SubagentStartedEntry
from ..errors import SessionNotFound
from ..events import origin_label
from ..runtime import Runtime
from ._read import MOVED, display_name, moved_children, redact, run_state

MAX_DEPTH = 6
"""Deeper nesting is cut (delegation is one level deep; this guards odd stores)."""


class LogCache:
    """Entries and metadata read once per page, shared by the tree and the timeline."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._entries: dict[str, list[Entry]] = {}
        self._metas: dict[str, SessionMeta] = {}

    async def entries(self, session_id: str) -> list[Entry]:
        """The session's whole log."""
        found = self._entries.get(session_id)
        if found is None:
            found = self._entries[session_id] = await self.runtime.store.load(session_id)
        return found

    async def meta(self, session_id: str) -> SessionMeta:
        """The session's metadata (raises `SessionNotFound`)."""
        found = self._metas.get(session_id)
        if found is None:
            found = self._metas[session_id] = await self.runtime.store.get(session_id)
        return found

    async def children(self, session_id: str) -> list[SessionMeta]:
        """Sessions whose parent is `session_id`, oldest first."""
        metas = await self.runtime.store.list(parent_id=session_id)
        for meta in metas:
            self._metas.setdefault(meta.id, meta)
        return list(reversed(metas))


@dataclass(slots=True)
class CallGroup:
    """The children one tool call created (`call_id` "" for unlinked ones)."""

    call_id: str
    tool: str
    children: list[TreeNode] = field(default_factory=list)


@dataclass(slots=True)
class TreeNode:
    """A session in the tree, with what a supervisor wants at a glance."""

    session_id: str
    name: str
    origin: str
    agent: str
    status: str
    mode: str
    task: str
    tokens: int
    started_at: float
    ended_at: float | None
    groups: list[CallGroup] = field(default_factory=list)

    @property
    def duration(self) -> float | None:
        """Seconds from start to end (None while it has not ended)."""
        return None if self.ended_at is None else max(0.0, self.ended_at - self.started_at)


def child_span(entries: list[Entry], created_at: float) -> tuple[float, float | None, int | None]:
    """(start, end, tokens of the terminal entry) of a child's log."""
    start = next(
        (e.created_at for e in entries if isinstance(e.payload, SubagentStartedEntry)),
        entries[0].created_at if entries else created_at,
    )
    for e in entries:
        payload = e.payload
        if isinstance(payload, SubagentResult):
            tokens = payload.usage.total_tokens if payload.usage is not None else None
            return start, e.created_at, tokens
    return start, None, None


async def delegation_tree(cache: LogCache, session_id: str) -> TreeNode:
    """The tree rooted at `session_id`."""
    meta = await cache.meta(session_id)
    entries = await cache.entries(session_id)
    state = run_state(entries)
    ended = entries[-1].created_at if entries and not state.active else None
    root = TreeNode(
        meta.id,
        display_name(meta),
        "",
        meta.agent,
        state.status,
        str(meta.metadata.get("mode", "")),
        str(meta.metadata.get("task", "")),
        state.tokens,
        entries[0].created_at if entries else meta.created_at,
        ended,
    )
    await _grow(cache, root, entries, 1)
    return root


async def _grow(cache: LogCache, node: TreeNode, entries: list[Entry], depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    tools: dict[str, str] = {}
    links: list[SubagentLink] = []
    for entry in entries:
        payload = entry.payload
        if isinstance(payload, MessageEntry):
            tools.update((c.id, c.name) for c in payload.message.tool_calls)
        elif isinstance(payload, SubagentLink):
            links.append(payload)
    groups: dict[str, CallGroup] = {}
    seen: set[str] = set()
    moved = moved_children(entries)
    for link in links:
        try:
            child = await _child(cache, node, link.child_session_id, link.name, depth)
            if link.child_session_id in moved:
                child.mode = MOVED
        except SessionNotFound:
            continue  # deleted since: the link outlives it in the log
        group = groups.get(link.call_id)
        if group is None:
            group = groups[link.call_id] = CallGroup(link.call_id, tools.get(link.call_id, ""))
        group.children.append(child)
        seen.add(link.child_session_id)
    for meta in await cache.children(node.session_id):
        if meta.id not in seen:
            group = groups.setdefault("", CallGroup("", ""))
            group.children.append(await _child(cache, node, meta.id, display_name(meta), depth))
    node.groups = list(groups.values())


async def _child(
    cache: LogCache, parent: TreeNode, child_id: str, name: str, depth: int
) -> TreeNode:
    meta = await cache.meta(child_id)
    entries = await cache.entries(child_id)
    status = await child_status(cache.runtime, child_id)
    start, end, tokens = child_span(entries, meta.created_at)
    node = TreeNode(
        child_id,
        name,
        origin_label(name, child_id, parent.origin),
        meta.agent,
        status.value,
        redact(str(meta.metadata.get("mode", "inline"))),
        str(meta.metadata.get("task", "")),
        tokens if tokens is not None else run_state(entries).tokens,
        start,
        end,
    )
    await _grow(cache, node, entries, depth + 1)
    return node
