"""The transport retry policy, one for every adapter.

The loop applies it around each model request: a retryable error (connection
failure, 408, 429, 5xx, "overloaded", a stream cut before the response was
complete) is tried again after an exponential, jittered delay that honours
the server's `Retry-After` up to a cap. Nothing is committed to the log until
a response is complete, so retrying a whole attempt never duplicates output.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..errors import ProviderError

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry a failed model request.

    `max_retries` counts retries after the first attempt. The delay before
    retry n (1-based) is `initial_delay * multiplier**(n-1)`, capped at
    `max_delay`, scaled by a random factor in `[1 - jitter, 1]`; a server's
    `Retry-After` replaces it when larger, capped at `max_retry_after`.
    """

    max_retries: int = 3
    initial_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 8.0
    jitter: float = 0.25
    max_retry_after: float = 60.0

    def should_retry(self, error: BaseException, retries_so_far: int) -> bool:
        """Whether `error` may be retried after `retries_so_far` retries.

        Only a `ProviderError` marked retryable is: a configuration mistake
        (`ConfigurationError`, such as a base URL that is not http(s)) fails
        the same way every time and is never retried.
        """
        return (
            retries_so_far < self.max_retries
            and isinstance(error, ProviderError)
            and error.retryable
        )

    def delay(self, retry: int, error: BaseException | None = None) -> float:
        """Seconds to wait before retry number `retry` (1-based)."""
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (retry - 1))
        base *= 1.0 - self.jitter * random.random()
        hint = getattr(error, "retry_after", None)
        if isinstance(hint, int | float) and hint > base:
            return min(float(hint), self.max_retry_after)
        return base

    @classmethod
    def none(cls) -> RetryPolicy:
        """A policy that never retries."""
        return cls(max_retries=0)
