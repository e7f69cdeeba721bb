"""Recording a model's exchanges and replaying them: a real run as an offline test.

`RecordingModel(model)` keeps each request with the response it got;
`save(path)` writes them as one small JSON file, recorded above the wire (no
URL, key or header is ever in it). `ReplayModel.load(path)` answers each
request with the response recorded for the same request, in any order, and
raises `ReplayMismatch` with a diff against the nearest recorded request
when the run asks something the recording does not hold.
`replay.tools(agent_tools)` stands in for the tools with ones that answer
each call with its recorded result, to test the agent's logic alone.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._deltas import TextDelta
from .._offered import changes, recorded_offer, tools_data
from .._redact import redact_value
from ..entries import Entry, MessageEntry, RunStartedEntry
from ..errors import ReplayMismatch
from ..messages import Message, ToolResult, Usage
from ._base import (
    Model,
    ModelRequest,
    ModelResponse,
    ResponseCompleted,
    StreamEvent,
)

if TYPE_CHECKING:
    from ..tools import Tool, ToolContext, ToolOutput


RECORDING_FORMAT = "taskloom-recording/1"  # the `format` of the files this version reads


@dataclass(frozen=True, slots=True)
class Exchange:
    """One recorded request and the response it got, as plain JSON data."""

    request: Mapping[str, Any]
    response: Mapping[str, Any]


def request_data(request: ModelRequest) -> dict[str, Any]:
    """A request as the JSON a recording keeps and compares: what decides the answer."""
    data: dict[str, Any] = {
        "system": request.system,
        "messages": [m.to_dict() for m in request.messages],
        "tools": tools_data(request.tools),
        "settings": request.settings.to_dict(),  # not its context_window: never sent
    }
    schema = request.output_schema
    data["output"] = (
        None if schema is None else {"name": request.output_name, "schema": dict(schema)}
    )
    # Through JSON once, so a live request compares equal to a loaded one.
    return json.loads(json.dumps(data, ensure_ascii=False, default=str))  # type: ignore[no-any-return]


def dump_recording(model: Mapping[str, Any], exchanges: Sequence[Exchange]) -> str:
    """The text of a recording file, in a stable layout (the same exchanges make
    the same bytes, a changed recording diffs well)."""
    data = {
        "format": RECORDING_FORMAT,
        "model": dict(model),
        "exchanges": [{"request": e.request, "response": e.response} for e in exchanges],
    }
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


class RecordingModel:
    """A model that passes requests to `model` and records each exchange
    (`exchanges`); `save(path)` writes them for `ReplayModel.load`. It has the
    recorded model's `name`, `provider`, `spec` and `native_output`."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.name = model.name
        self.provider = model.provider
        self.spec = model.spec
        self.native_output = bool(getattr(model, "native_output", True))
        self.exchanges: list[Exchange] = []

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Ask the model and record the exchange."""
        response = await self.model.request(request)
        self._keep(request, response)
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream from the model and record the exchange once it is complete."""
        async for event in self.model.stream(request):
            if isinstance(event, ResponseCompleted):
                self._keep(request, event.response)
            yield event

    def _keep(self, request: ModelRequest, response: ModelResponse) -> None:
        # A server may echo what it was sent (a key in a reflected header):
        # no recording holds the model's credentials.
        secrets = tuple(getattr(self.model, "credentials", ()))
        self.exchanges.append(
            Exchange(
                redact_value(request_data(request), secrets),
                redact_value(response.to_dict(), secrets),
            )
        )

    def dumps(self) -> str:
        """The recording file's text (see `dump_recording`)."""
        # Not the spec: it may name a server's URL, which says nothing of the
        # answers and would change the file whenever the server moves.
        model = {"name": self.name, "provider": self.provider, "native_output": self.native_output}
        return dump_recording(model, self.exchanges)

    def save(self, path: str | Path) -> None:
        """Write the recording to `path` (its folder is made if missing)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.dumps(), encoding="utf-8")


class ReplayModel:
    """A model that answers from a recording (`load(path)`, `loads(text)`), under
    the recorded model's name and provider, so the run builds the requests it
    built when recorded. `check_done()` raises `ReplayMismatch` while some
    are left unasked.
    """

    def __init__(
        self, exchanges: Iterable[Exchange], *, model: Mapping[str, Any] | None = None
    ) -> None:
        self.exchanges = list(exchanges)
        info = dict(model or {})
        self.name = str(info.get("name", "replay"))
        self.provider = str(info.get("provider", "replay"))
        self.native_output = bool(info.get("native_output", True))
        self._open = list(range(len(self.exchanges)))

    @classmethod
    def loads(cls, text: str) -> ReplayModel:
        """A replay of the recording in `text` (a recording file's content)."""
        data = json.loads(text)
        if data.get("format") != RECORDING_FORMAT:
            raise ReplayMismatch(
                f"not a recording this version reads: format {data.get('format')!r}, "
                f"expected {RECORDING_FORMAT!r}"
            )
        exchanges = [Exchange(e["request"], e["response"]) for e in data.get("exchanges") or ()]
        return cls(exchanges, model=data.get("model"))

    @classmethod
    def from_entries(cls, entries: Iterable[Entry]) -> ReplayModel:
        """A replay of a session's log (`await session.entries()`): each
        assistant message answers the request made of the messages before it.
        Each run's first request must also offer the instructions and tool
        schemas its start entry holds (older logs compare by messages alone).
        A log keeps no settings; a compacted session's later requests do not
        match."""
        exchanges: list[Exchange] = []
        messages: list[dict[str, Any]] = []
        seen: dict[str, Mapping[str, Any]] = {}
        offered: Mapping[str, Any] | None = None
        for entry in entries:
            payload = entry.payload
            if isinstance(payload, RunStartedEntry):
                # Within a run, a toolset's list may change between rounds
                # unrecorded: only the run's first request is held to it.
                offered = recorded_offer(payload.offered, seen)
            if not isinstance(payload, MessageEntry):
                continue
            if payload.delivered_text:
                messages.append(Message.user(payload.delivered_text).to_dict())
            message = payload.message
            if message.role == "assistant":
                response = ModelResponse(
                    message,
                    payload.usage or Usage(),
                    "tool_use" if message.tool_calls else "end_turn",
                    message.model,
                    message.provider,
                )
                data: dict[str, Any] = {"messages": messages}
                if offered is not None:
                    data["system"], data["tools"] = offered["instructions"], offered["tools"]
                    offered = None
                request = json.loads(json.dumps(data, ensure_ascii=False))
                exchanges.append(Exchange(request, response.to_dict()))
            messages.append(message.to_dict())
        return cls(exchanges)

    @classmethod
    def load(cls, path: str | Path) -> ReplayModel:
        """A replay of the recording file at `path`."""
        return cls.loads(Path(path).read_text(encoding="utf-8"))

    @property
    def spec(self) -> str:
        """`provider:name` of the recorded model (a recording keeps no URL)."""
        return f"{self.provider}:{self.name}"

    @property
    def used(self) -> int:
        """How many recorded exchanges have answered a request."""
        return len(self.exchanges) - len(self._open)

    def check_done(self) -> None:
        """Raise `ReplayMismatch` unless every recorded exchange was asked."""
        if self._open:
            first = self._open[0]
            raise ReplayMismatch(
                f"the run asked {self.used} of the {len(self.exchanges)} recorded requests; "
                f"request {first + 1} and {len(self._open) - 1} more were never asked"
            )

    async def request(self, request: ModelRequest) -> ModelResponse:
        """The response recorded for this request (`ReplayMismatch` if none)."""
        wanted = request_data(request)
        for i in self._open:
            if _matches(self.exchanges[i].request, wanted):
                self._open.remove(i)
                return ModelResponse.from_dict(self.exchanges[i].response)
        raise ReplayMismatch(self._mismatch(wanted))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """`request`, streamed: the text as one delta, then the response."""
        response = await self.request(request)
        if response.message.text:
            yield TextDelta(text=response.message.text)
        yield ResponseCompleted(response)

    def _mismatch(self, wanted: Mapping[str, Any]) -> str:
        if not self._open:
            return (
                f"the run asked request {len(self.exchanges) + 1}, but the recording holds "
                f"only {len(self.exchanges)}; the request was:\n{_pretty(wanted)}"
            )
        import difflib  # only a failing replay needs it

        nearest = max(self._open, key=lambda i: _likeness(self.exchanges[i].request, wanted))
        compared = self.exchanges[nearest].request
        wanted = {key: wanted.get(key) for key in compared}
        recorded, asked = _pretty(compared).splitlines(), _pretty(wanted).splitlines()
        title = f"recorded request {nearest + 1}"
        diff = difflib.unified_diff(recorded, asked, title, "request of this run", lineterm="")
        where = _first_difference(compared, wanted, "request")
        agent = []
        if "tools" in compared:
            agent = changes(*(d.get(k) for d in (compared, wanted) for k in ("system", "tools")))
        changed = "".join(f"\n- {line}" for line in agent)
        return (
            (f"the agent differs from the recorded one:{changed}\n" if agent else "")
            + "the run asked a request the recording does not hold; its difference from the "
            f"nearest recorded one (request {nearest + 1} of {len(self.exchanges)}) "
            f"starts at {where}:\n" + "\n".join(diff)
        )

    def tools(self, tools: Iterable[Tool]) -> list[Tool]:
        """Stand-ins for `tools` that answer each call with its recorded result
        (same names, schemas, effects and approval rules; nothing runs). A call
        with no recorded result gets an error result saying so."""
        results: dict[str, ToolResult] = {}
        for exchange in self.exchanges:
            for m in exchange.request.get("messages") or ():
                for block in Message.from_dict(m).blocks:
                    if isinstance(block, ToolResult):
                        results.setdefault(block.tool_call_id, block)
        return [_recorded_tool(t, results) for t in tools]


def _recorded_tool(tool: Tool, results: Mapping[str, ToolResult]) -> Tool:
    from ..tools import Tool, ToolOutput

    class RecordedTool(Tool):
        __slots__ = ()

        async def call(self, arguments: dict[str, Any], ctx: ToolContext | None) -> ToolOutput:
            found = results.get(ctx.call_id) if ctx is not None else None
            if found is None:
                call_id = ctx.call_id if ctx is not None else "?"
                return ToolOutput(f"no recorded result for call {call_id} of {self.name}", True)
            return ToolOutput(found.content, found.is_error)

    return RecordedTool(
        tool.name,
        tool.description,
        tool.input_schema,
        effect=tool.effect,
        needs_approval=tool.needs_approval,
        timeout=tool.timeout,
        max_output_chars=tool.max_output_chars,
        concurrent=tool.concurrent,
    )


def _matches(recorded: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    # A request made from a session's log names only its messages: the
    # parts a recording does not have are not compared.
    return all(wanted.get(key) == value for key, value in recorded.items())


def _first_difference(a: Any, b: Any, path: str) -> str:
    """The path where `a` and `b` first differ (`request.tools[0].input_schema`)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key) or (key in a) != (key in b):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
        if len(a) != len(b):
            return f"{path}[{min(len(a), len(b))}]"
    return path


def _pretty(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)


def _likeness(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[int, int, int]:
    """How alike two requests are: messages in common from the start, then the
    same count of messages, then all else the same."""
    same = 0
    ma, mb = a.get("messages") or (), b.get("messages") or ()
    for x, y in zip(ma, mb, strict=False):
        if x != y:
            break
        same += 1
    rest = all(b.get(k) == v for k, v in a.items() if k != "messages")
    return same, int(len(ma) == len(mb)), int(rest)
