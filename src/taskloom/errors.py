"""The exceptions taskloom raises.

Stopping is a value (`RunResult.status`); these are for broken configuration,
provider errors that retries could not cure, conflicting decisions and
misuse of the API.
"""

from __future__ import annotations

__all__ = [
    "ApprovalConflict",
    "ApprovalsMissing",
    "AuthenticationError",
    "ConfigurationError",
    "ContextWindowExceeded",
    "InvalidRequest",
    "ModelScriptExhausted",
    "ProviderError",
    "ProviderOverloaded",
    "RateLimitError",
    "SessionNotFound",
    "StaleLeaseError",
    "TaskloomError",
    "TransportError",
]


class TaskloomError(Exception):
    """Base class of every taskloom exception."""


class ConfigurationError(TaskloomError, ValueError):
    """A definition is wrong (duplicate tool names, missing model, ...).

    Raised at construction, naming the culprit, never in the middle of a run.
    """


class SessionNotFound(TaskloomError, KeyError):
    """No session with that id exists in the store."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "session not found"


class ModelScriptExhausted(TaskloomError, AssertionError):
    """A scripted model was asked for more replies than it was given."""


class ApprovalConflict(TaskloomError):
    """A decision contradicts the one already recorded for that call."""


class ApprovalsMissing(TaskloomError):
    """`resume` was called while some parked calls have no decision yet."""

    def __init__(self, call_ids: list[str]) -> None:
        self.call_ids = call_ids
        super().__init__("no decision yet for call(s): " + ", ".join(call_ids))


class StaleLeaseError(TaskloomError):
    """A write carried a lease generation that is no longer current."""


class ProviderError(TaskloomError):
    """A provider answered with an error, or could not be reached.

    `status` is the HTTP status (None for transport failures), `error_type`
    the provider's own error type string, `message` the provider's message
    verbatim. `retryable` says whether the transport retry policy may try the
    request again; `retry_after` is the server's hint in seconds, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_type: str | None = None,
        provider: str | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
        body: object = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_type = error_type
        self.provider = provider
        self.retryable = _default_retryable(status) if retryable is None else retryable
        self.retry_after = retry_after
        self.body = body

    def __str__(self) -> str:
        where = f"{self.provider} " if self.provider else ""
        code = f"{self.status} " if self.status is not None else ""
        kind = f"{self.error_type}: " if self.error_type else ""
        return f"{where}{code}{kind}{self.message}".strip()


def _default_retryable(status: int | None) -> bool:
    return status in (408, 409, 429, 500, 502, 503, 504, 529)


class TransportError(ProviderError):
    """The connection failed or dropped before a whole response arrived."""

    def __init__(self, message: str, **kw: object) -> None:
        kw.setdefault("retryable", True)
        super().__init__(message, **kw)  # type: ignore[arg-type]


class AuthenticationError(ProviderError):
    """The key is missing, wrong, or lacks permission (401/403)."""


class RateLimitError(ProviderError):
    """The provider asked us to slow down (429)."""


class ProviderOverloaded(ProviderError):
    """The provider is temporarily overloaded (Anthropic 529, 'overloaded')."""


class ContextWindowExceeded(ProviderError):
    """The request does not fit the model's context window."""


class InvalidRequest(ProviderError):
    """The provider rejected the request as malformed (400/404/422)."""
