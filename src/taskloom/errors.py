"""The exceptions taskloom raises, all under `TaskloomError`.

Stopping is a value (`RunResult.status`); these are for broken configuration,
provider errors that retries could not cure, contention, conflicting
decisions and misuse of the API::

    TaskloomError
    ├── ConfigurationError      a definition is wrong (also a ValueError)
    │   └── APIKeyMissing       a model's provider needs a key and none was found
    ├── UsageError              the API was called in a state that forbids it
    │   ├── AnswerConflict      an answer contradicts the recorded one
    │   ├── ApprovalConflict    a decision contradicts the recorded one
    │   └── ApprovalsMissing    resume() while parked calls are undecided
    ├── SessionBusy             another run holds the session (retry, or wait=seconds)
    ├── SessionNotFound         no such session in the store (also a KeyError)
    ├── StaleLeaseError         a write carried a lease generation that moved on
    ├── VersionConflict         a memory write's if_version no longer matches (carries the current item)
    ├── StoreError              the store cannot be reached or read
    │   ├── StoreUnavailable    connecting failed (host, port and cause named)
    │   │   └── StoreNotFound   the store is not there, and was not to be created
    │   ├── CorruptEntry        an entry cannot be decoded (session and position named)
    │   └── SchemaNotMigrated   the database lacks tables (run `taskloom db migrate`)
    ├── BackgroundCapReached    too many activities of one kind in a session
    ├── CommandNotStarted       a background command could not start
    ├── DeleteRefused           a delete hook keeps its session from being deleted
    ├── FollowRefused           a remote party broke the protocol or a bound
    ├── ModelScriptExhausted    a scripted model ran out of replies
    ├── ReplayMismatch          a replayed run asked what its recording does not hold
    └── ProviderError           the provider failed, after retries
        ├── TransportError      the connection failed or dropped
        ├── AuthenticationError 401/403
        ├── RateLimitError      429
        ├── ProviderOverloaded  529 / overloaded
        ├── ContextWindowExceeded
        └── InvalidRequest      400/404/422

One warning, `ToolDefinitionWarning` (a `UserWarning`), flags a tool
definition that works but leaves the model guessing (an untyped parameter,
no description).

Catch `ProviderError` for "the provider is down", `SessionBusy` for "someone
else is running this session", `UsageError` for bugs in the calling code.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "APIKeyMissing",
    "AnswerConflict",
    "ApprovalConflict",
    "ApprovalsMissing",
    "AuthenticationError",
    "BackgroundCapReached",
    "CommandNotStarted",
    "ConfigurationError",
    "ContextWindowExceeded",
    "CorruptEntry",
    "DeleteRefused",
    "FollowRefused",
    "InvalidRequest",
    "ModelScriptExhausted",
    "ReplayMismatch",
    "ProviderError",
    "ProviderOverloaded",
    "RateLimitError",
    "SchemaNotMigrated",
    "SessionBusy",
    "SessionNotFound",
    "StaleLeaseError",
    "StoreError",
    "StoreNotFound",
    "StoreUnavailable",
    "TaskloomError",
    "ToolDefinitionWarning",
    "TransportError",
    "UsageError",
    "VersionConflict",
]


class TaskloomError(Exception):
    """Base class of every taskloom exception."""


class ConfigurationError(TaskloomError, ValueError):
    """A definition is wrong (duplicate tool names, missing model, ...).

    Raised at construction, naming the culprit, never in the middle of a run.
    """


class APIKeyMissing(ConfigurationError):
    """A model's provider needs an API key, and neither `api_key=` nor its
    environment variable gave one (raised when the model is built).

    `provider` names the provider, `variables` the environment variables
    read for its key, in the order they are read.
    """

    def __init__(self, provider: str, variables: tuple[str, ...]) -> None:
        self.provider = provider
        self.variables = variables
        shown = " or ".join(variables)
        super().__init__(
            f"no API key for {provider}: set the {shown} environment variable or pass api_key="
        )


class ToolDefinitionWarning(UserWarning):
    """A tool definition that works but tells the model too little: a
    parameter without a type annotation (the model is told any JSON value
    will do) or a tool without a docstring or `description=` (the model sees
    only its name). Issued once per definition, pointing at the function."""


class UsageError(TaskloomError):
    """The API was called in a state that forbids it (a bug in the calling code).

    Examples: `resume()` with nothing parked, `run()` while the session is
    parked for approval, approving a call that was never requested.
    """


class SessionBusy(TaskloomError):
    """Another run (in this process or another) holds the session's lease.

    `session_id` names the session, `holder` the lease holder when known.
    Try again later, or pass `wait=` (seconds, `math.inf` for as long as it
    takes) to wait for the lease.
    """

    def __init__(self, session_id: str, holder: str | None = None) -> None:
        self.session_id = session_id
        self.holder = holder
        who = f" (held by {holder})" if holder else ""
        super().__init__(f"session {session_id} is busy: another run holds it{who}")


class StoreError(TaskloomError):
    """The session store cannot be reached, or what it holds cannot be read."""


class StoreUnavailable(StoreError):
    """Connecting to the store failed; the message names the host, port and cause."""


class StoreNotFound(StoreUnavailable):
    """The store does not exist, and was opened not to create it
    (`open_backend(url, create=False)`); the message names it. Nothing was
    created in looking for it."""


class CorruptEntry(StoreError):
    """A stored entry cannot be decoded; the message names the session and position."""


class SchemaNotMigrated(StoreError):
    """The database lacks the tables (or their latest version) this taskloom needs
    and was not to create them: run `taskloom db migrate URL`."""


class BackgroundCapReached(TaskloomError):
    """Too many activities of one kind are running in the session."""

    def __init__(self, kind: str, cap: int | None) -> None:
        super().__init__(f"at most {cap} '{kind}' activities may run at once in a session")
        self.kind = kind
        self.cap = cap


class CommandNotStarted(TaskloomError):
    """A background command could not be started at all (not found, not
    executable, bad cwd). The message says why, written for the model."""


class DeleteRefused(TaskloomError):
    """A delete hook refuses to let its session be deleted (say why in the message)."""


class FollowRefused(TaskloomError):
    """A remote party broke the protocol (an answer about another task than
    the one asked about) or a bound on what it may make taskloom write
    (`taskloom.background.MAX_QUESTIONS`): the followed work fails with
    this message."""


class SessionNotFound(TaskloomError, KeyError):
    """No session with that id exists in the store."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "session not found"


class ModelScriptExhausted(TaskloomError, AssertionError):
    """A scripted model was asked for more replies than it was given."""


class ReplayMismatch(TaskloomError, AssertionError):
    """A replayed run asked a request its recording does not hold (the message
    shows the difference), or ended before asking every recorded one."""


class ApprovalConflict(UsageError):
    """A decision contradicts the one already recorded for that call."""


class AnswerConflict(UsageError):
    """An answer contradicts the one already recorded for that input request."""


class ApprovalsMissing(UsageError):
    """`resume` was called while some parked calls have no decision yet."""

    def __init__(self, call_ids: list[str]) -> None:
        self.call_ids = call_ids
        super().__init__("no decision yet for call(s): " + ", ".join(call_ids))


class StaleLeaseError(TaskloomError):
    """A write carried a lease generation that is no longer current."""


class VersionConflict(TaskloomError):
    """A memory write (`put` or `delete` with `if_version=`) was refused: the
    item's version is no longer the one the writer read, so writing would
    lose another writer's edit. Nothing was written.

    `current` is the item as read just after the refusal (a `MemoryItem`),
    or None when it is absent, so the writer can redo its edit on it.
    """

    def __init__(self, message: str, current: Any = None) -> None:
        super().__init__(message)
        self.current = current


_RETRYABLE = (408, 409, 429, 500, 502, 503, 504, 529)


class ProviderError(TaskloomError):
    """A provider answered with an error, or could not be reached.

    `status` is the HTTP status (None for transport failures), `error_type`
    the provider's own error type, `message` its message verbatim and `body`
    its decoded answer, with any credential the adapter sent that the provider
    echoed replaced by `[redacted]`. `retryable` says whether the retry policy
    may try again; `retry_after` is the server's hint in seconds, if any.
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
        self.retryable = status in _RETRYABLE if retryable is None else retryable
        self.retry_after = retry_after
        self.body = body

    def __str__(self) -> str:
        where = f"{self.provider} " if self.provider else ""
        code = f"{self.status} " if self.status is not None else ""
        kind = f"{self.error_type}: " if self.error_type else ""
        return f"{where}{code}{kind}{self.message}".strip()


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
    """The request does not fit the model's context window.

    Raised when the provider says so, and by the wire adapters when a server
    answers a request estimated over the model's known window with an empty
    stream or an empty answer (no text, no tool calls) instead.
    """


class InvalidRequest(ProviderError):
    """The provider rejected the request as malformed (400/404/422)."""
