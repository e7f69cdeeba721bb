"""One value of every kind taskloom stores, every field set to something
other than its default: the entries of a session log (every kind), the
messages they hold (every block kind) and the records of background work.

`tests/fixtures/make_stored_v1.py` wrote these through a real store into
`tests/fixtures/stored_v1.json`; `tests/test_stored_shapes.py` checks that
what was stored then still reads as these values and is written the same.
"""

from __future__ import annotations

from taskloom.backends import BackgroundActivity, BackgroundNotice
from taskloom.entries import (
    ApprovalDecision,
    ApprovalEscalated,
    ApprovalRequests,
    CallsStarted,
    CompactionEntry,
    DeferredEntry,
    DeferredItem,
    ForkLink,
    InputAnswer,
    InputRequest,
    MCPTaskEnded,
    MemoryEdited,
    MessageEntry,
    ModelChange,
    NoticeDeliveredEntry,
    Payload,
    RequestedCall,
    RunFinishedEntry,
    RunStartedEntry,
    Steer,
    StopRequest,
    SubagentDispatched,
    SubagentLink,
    SubagentReport,
    SubagentResult,
    SubagentStartedEntry,
)
from taskloom.messages import (
    CompactionBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    Usage,
)
from taskloom.results import BudgetLeft, RunStatus

USAGE = Usage(11, 22, 3, 4, 5, 2, estimated=True)
OWN = Usage(7, 8, 1, 2, 3, 1)

MESSAGES: list[Message] = [
    Message.user("hello"),
    Message(
        "user",
        (
            TextBlock("look at this"),
            ImageBlock(data=b"\x89PNG\r\n", media_type="image/webp"),
            ImageBlock(url="https://example.com/cat.jpg", media_type="image/jpeg"),
        ),
        origin="steer",
    ),
    Message(
        "assistant",
        (
            ThinkingBlock("hmm", signature="sig", provider="anthropic", id="th_1"),
            ThinkingBlock(redacted=True, data="opaque", provider="anthropic"),
            TextBlock("calling"),
            ToolCall("c1", "search", {"q": "x", "n": [1, 2.5, None, True]}, provider_id="fc_1"),
            ToolCall("c2", "broken", raw_arguments="{not json"),
            CompactionBlock("openai-responses", {"type": "compaction", "content": "earlier"}),
        ),
        provider="anthropic",
        model="claude-x",
        origin="model",
    ),
    Message(
        "tool",
        (
            ToolResult("c1", "found", tool_name="search"),
            ToolResult("c2", "bad arguments", is_error=True, tool_name="broken"),
        ),
    ),
]

ENTRIES: list[Payload] = [
    MessageEntry(MESSAGES[2], "notice text", ("n1", "n2"), (3, 4), USAGE),
    MessageEntry(MESSAGES[1]),
    Steer("go left"),
    DeferredEntry("d1", DeferredItem.context("some context")),
    DeferredEntry(
        "d2", DeferredItem.delegation_result("answer", {"agent_id": "a"}, {"child": "c"})
    ),
    DeferredEntry("d3", DeferredItem.subagent_finished("s1", "done")),
    DeferredEntry("d4", DeferredItem("custom_kind", {"x": 1})),
    StopRequest("enough"),
    ForkLink("origin-session", 12),
    ModelChange("openai:gpt-x", True, {"effort": "high"}, True),
    ModelChange(None, False, None, True),
    CompactionEntry("the summary", 9, "dropped", 1000, 400, "cut short"),
    ApprovalRequests(
        5,
        (
            RequestedCall("c1", "rm", {"path": "/tmp/x"}, "h1", "predicate raised"),
            RequestedCall("c2", "ls", {}, "h2"),
        ),
    ),
    ApprovalDecision("c1", True, "h1", 5, "looks fine"),
    CallsStarted(5, ("c1", "c2"), step=True),
    ApprovalEscalated("child-1", "helper", ("c3", "c4"), "c9", 7),
    ApprovalEscalated("child-2", "helper2", ("c5",)),
    SubagentLink(
        "child-1",
        "helper",
        "reviewer",
        "agent-x",
        "review it",
        "background",
        "c9",
        {"agent_id": "agent-x"},
        {"parent": "p", "child": "child-1"},
    ),
    SubagentDispatched({"name": "helper", "task": "review it", "budget": None}),
    SubagentStartedEntry("helper"),
    SubagentResult("done", {"verdict": "ok"}, "partial trouble", USAGE),
    SubagentResult("failed", None, "boom", None),
    SubagentReport("child-1", "running", {"agent_id": "agent-x"}, {"child": "child-1"}),
    MCPTaskEnded("act-1", "done", "finished well"),
    InputRequest(
        "in-1",
        "act-1",
        "k1",
        {"method": "elicitation/create", "params": {"message": "?"}},
        "server/tool/task",
        1700000000.5,
    ),
    InputAnswer("in-1", "accept", {"name": "Ada"}),
    InputAnswer("in-2", "decline"),
    RunStartedEntry(
        "agent-x",
        True,
        "00-abc-def-01",
        {"digest": "d", "instructions": "be kind"},
        "worker-1",
        {"tree": "t1", "budget": {"tokens": 100}},
    ),
    RunStartedEntry(),
    RunFinishedEntry(
        RunStatus.BUDGET_EXHAUSTED,
        "ran out",
        USAGE,
        3,
        4,
        {"answer": 42},
        BudgetLeft(-5, 1200),
        6,
        1,
        OWN,
        "the answer",
    ),
    RunFinishedEntry(RunStatus.COMPLETED),
    NoticeDeliveredEntry("notices", ("n1", "n2")),
    # Added with long-term memory (after v1): a run's memory, a memory edit.
    RunStartedEntry("agent-m", memory=(("user", "u1"), ("user", "u1", "archive"))),
    MemoryEdited(
        "call-1", "agent-m", ("user", "u1"), "block:human", "append", 1, 2, "a" * 64, "b" * 64, True
    ),
]

ACTIVITIES = [
    BackgroundActivity("a1", "shell", "pytest -q", 1700000000.25, "run-1", {"pid": 42}),
    BackgroundActivity("a2", "subagent", "review", 1700000001.0),
]
NOTICES = [
    BackgroundNotice("n1", "a1", "shell", "tests passed", "failed", 1700000002.5, {"exit": 1}),
    BackgroundNotice("n2", "a2", "subagent", "done"),
]
