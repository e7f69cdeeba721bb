"""Where in a round a strategy is asked (`RoundBoundary`): apart from the
strategies themselves, which a run without one never imports."""

from __future__ import annotations

from enum import StrEnum


class RoundBoundary(StrEnum):
    """Where in a round the strategy is asked."""

    TOOL_RESULTS_COMMITTED = "tool_results_committed"
    ASSISTANT_MESSAGE_COMMITTED = "assistant_message_committed"
