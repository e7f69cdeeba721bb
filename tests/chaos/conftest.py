"""Chaos tests: real processes, real kills, loops of trials (marked slow).

The helpers one level up (`pg`, `cassettes`, ...) are importable from here.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
