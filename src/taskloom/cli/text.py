"""Text from a store, a model or a tool, made safe to print on a terminal.

A session log is data: printed, it must not be able to clear the screen,
retitle the window, rewrite the line above or reorder what a reader sees.
Every text the CLI prints that it did not write itself goes through
`visible`. No optional imports here: error reports use it too.
"""

from __future__ import annotations

import re

__all__ = ["visible"]

# C0 controls but newline and tab, DEL, C1 controls; and the bidirectional
# overrides and isolates, which reorder what a reader sees ("00189" shown for
# "98100") without changing the bytes.
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _spelled(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every control character spelled out (`\\x1b`, `\\x07`,
    `\\u202e`), so the terminal shows it instead of obeying it; newlines and
    tabs stay as they are."""
    return _HIDDEN.sub(_spelled, text)
