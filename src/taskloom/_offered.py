"""What a run offers the model (its instructions and tool schemas), as its log
keeps it, and how two offers differ, in words. A run's start entry holds the
digest of its offer, and the offer itself only when the digest differs from
the previous run's: a session whose agent does not change stores it once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._codec import encode
from .results import ToolSpec

INSTRUCTIONS_DIFF_LINES = 20
"""At most this many lines of a changed instructions' diff are shown."""


def tools_data(specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """The tools as a request recording (and a run's start entry) keeps them."""
    return [encode(t) for t in specs]


def offer(
    instructions: str | None, specs: Sequence[ToolSpec], previous: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The `offered` value of a run's start entry: the digest of `instructions`
    and `specs`, with both written out unless `previous` (the session's
    previous run's `offered`) has the same digest."""
    known = [_known(spec) for spec in specs]
    # NUL separates the parts: neither JSON text nor a repr holds one.
    text = "\0".join([repr(instructions), *(k[1] for k in known)])
    digest = hashlib.sha256(text.encode()).hexdigest()
    if previous is not None and previous.get("digest") == digest:
        return {"digest": digest}
    return {"digest": digest, "instructions": instructions, "tools": [k[2] for k in known]}


# Each tool's JSON text and data by the id of its (kept) spec: agents share
# specs, so a run's start hashes short texts instead of encoding schemas. The
# data goes through JSON as a recording's does (a replay compares them).
_KNOWN: dict[int, tuple[ToolSpec, str, dict[str, Any]]] = {}
_KNOWN_KEPT = 4096


def _known(spec: ToolSpec) -> tuple[ToolSpec, str, dict[str, Any]]:
    known = _KNOWN.get(id(spec))
    if known is not None and known[0] is spec:
        return known
    # Sorted keys: the same schema always gives the same digest.
    text = json.dumps(tools_data((spec,))[0], sort_keys=True, ensure_ascii=False, default=str)
    if len(_KNOWN) >= _KNOWN_KEPT:
        _KNOWN.clear()
    known = _KNOWN[id(spec)] = (spec, text, json.loads(text))
    return known


def without_schemas(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A run start entry's data with the digest of what the run offered but
    not the schemas: what a session's fold (and so each snapshot row) keeps."""
    offered = data.get("offered")
    if not isinstance(offered, Mapping) or "tools" not in offered:
        return data
    return {**data, "offered": {"digest": offered.get("digest")}}


def recorded_offer(
    offered: Mapping[str, Any] | None, seen: dict[str, Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """What a run offered, from its start entry's `offered` and the earlier
    runs' (`seen`, by digest, which this updates): `{"instructions", "tools"}`,
    or None when the log does not say (a log written before runs recorded it)."""
    if not offered or not isinstance(offered.get("digest"), str):
        return None
    digest = offered["digest"]
    if "tools" in offered:
        seen[digest] = {"instructions": offered.get("instructions"), "tools": offered["tools"]}
    return seen.get(digest)


def changes(recorded_system: Any, recorded_tools: Any, system: Any, tools: Any) -> list[str]:
    """What differs between a recorded offer and this run's, one line per
    change: a tool added or removed, a tool's description, a parameter added,
    removed, made (no longer) required or changed (which field, from what to
    what), and changed instructions with a short unified diff. Empty when
    the two are the same."""
    found: list[str] = []
    before = {str(t.get("name")): t for t in recorded_tools or () if isinstance(t, Mapping)}
    after = {str(t.get("name")): t for t in tools or () if isinstance(t, Mapping)}
    found += [f"tool {name!r} removed" for name in before if name not in after]
    for name, tool in after.items():
        old = before.get(name)
        if old is None:
            found.append(f"tool {name!r} added")
        elif old != tool:
            found += [f"tool {name!r}: {c}" for c in _tool_changes(old, tool)]
    if not found and list(before) != list(after):
        found.append("tools offered in another order: " + ", ".join(map(repr, after)))
    if recorded_system != system:
        found.append(_instructions_diff(recorded_system, system))
    return found


def _tool_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    if old.get("description") != new.get("description"):
        out.append("description changed")
    a, b = _mapping(old.get("input_schema")), _mapping(new.get("input_schema"))
    pa, pb = _mapping(a.get("properties")), _mapping(b.get("properties"))
    out += [f"parameter {p!r} removed" for p in pa if p not in pb]
    for p, schema in pb.items():
        if p not in pa:
            out.append(f"parameter {p!r} added")
            continue
        was, now = _mapping(pa[p]), _mapping(schema)
        for key in [*was, *(k for k in now if k not in was)]:
            if was.get(key) != now.get(key):
                out.append(
                    f"parameter {p!r}: {key} changed from {shown(was.get(key))} "
                    f"to {shown(now.get(key))}"
                )
    ra, rb = set(a.get("required") or ()), set(b.get("required") or ())
    out += [f"parameter {p!r} now required" for p in sorted(rb - ra) if p in pa]
    out += [f"parameter {p!r} no longer required" for p in sorted(ra - rb) if p in pb]
    for key in sorted((set(a) | set(b)) - {"properties", "required"}):
        if a.get(key) != b.get(key):
            out.append(f"input schema: {key} changed")
    return out or ["schema changed"]


def _instructions_diff(recorded: Any, now: Any) -> str:
    import difflib  # imported here: only a changed agent definition needs it

    lines = list(
        difflib.unified_diff(
            str(recorded or "").splitlines(),
            str(now or "").splitlines(),
            "recorded instructions",
            "instructions of this run",
            lineterm="",
            n=1,
        )
    )
    if len(lines) > INSTRUCTIONS_DIFF_LINES:
        more = len(lines) - INSTRUCTIONS_DIFF_LINES
        lines = [*lines[:INSTRUCTIONS_DIFF_LINES], f"... ({more} more lines)"]
    if recorded is None or now is None:
        lines.insert(0, "(none recorded)" if recorded is None else "(none in this run)")
    return "instructions changed:\n" + "\n".join(lines)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def shown(value: Any, limit: int = 60) -> str:
    """`value` as JSON for a reader, cut to `limit` characters."""
    text = "(nothing)" if value is None else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
