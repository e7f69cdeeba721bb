"""Scale-out tests: real PostgreSQL, real `taskloom worker` processes.

The helpers one level up (`pg`, ...) and this folder's `queue_app` (the
workers' `--app` factory) are importable from here.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for path in (str(_HERE.parent), str(_HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

from pg import pg_schema  # noqa: E402, F401 (the private-schema fixture, for every test here)
