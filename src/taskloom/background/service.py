"""The runtime's background service: where runs find their notices.

Until a registry and inbox are configured, there is nothing in the
background and runs skip notice delivery entirely (no per-round cost).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..loop.context import ToolContext
    from ..runtime import Runtime

__all__ = ["BackgroundService"]


class BackgroundService:
    """Background work of one runtime."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @classmethod
    def for_store(cls, runtime: Runtime) -> BackgroundService:
        """The service on the same backend as the runtime's store."""
        return cls(runtime)

    def run_notices(self, session_id: str, run_id: str) -> Any:
        """Per-run notice delivery, or None when nothing runs in the background."""
        return None

    async def start(self, ctx: ToolContext, kind: str, description: str, work: Any, **options: Any) -> str:
        """Start background work for the calling tool's session."""
        raise ConfigurationError("background work is not configured on this runtime")

    async def close(self) -> None:
        """Stop what this service started."""
