"""When the admin client retries, and how long it waits in between (pure; no clock, no I/O).

Only idempotent requests are retried (GET, DELETE, the PUTs that create something and answer
409 once it exists, POST skip_all), and only for failures that say nothing about the request
itself: connection errors, timeouts and 5xx. A 4xx is an answer, never retried.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# 502/503/504 are what a proxy or a broker still loading a topic bundle answers; 500 is retried
# too because Pulsar reports many transient metadata-store failures as plain 500.
RETRYABLE_STATUSES = frozenset({500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter, bounded in attempts and in total time.

    ``retries`` is the number of *extra* attempts after the first one. ``timeout`` bounds each
    attempt; the whole call is therefore bounded by :meth:`worst_case_seconds`.
    """

    retries: int = 3
    timeout: float = 10.0
    base_delay: float = 0.1
    max_delay: float = 2.0
    multiplier: float = 2.0
    # ±fraction of each delay, so that many gateway replicas retrying after one broker hiccup
    # do not all come back at the same instant.
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError("retries must be >= 0")
        if self.timeout <= 0:
            raise ValueError("timeout must be > 0")
        if self.base_delay < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError("delays must be >= 0 and multiplier >= 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    @property
    def attempts(self) -> int:
        return self.retries + 1

    def delay(self, retry_number: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry ``retry_number`` (1 for the first retry)."""
        if retry_number < 1:
            raise ValueError("retry_number starts at 1")
        raw = min(self.max_delay, self.base_delay * self.multiplier ** (retry_number - 1))
        if self.jitter == 0 or raw == 0:
            return raw
        spread = raw * self.jitter
        return raw - spread + (rng or random).random() * 2 * spread

    def worst_case_seconds(self) -> float:
        """Upper bound on one call: every attempt times out and every delay is the longest."""
        waits = sum(
            min(self.max_delay, self.base_delay * self.multiplier ** (n - 1)) * (1 + self.jitter)
            for n in range(1, self.retries + 1)
        )
        return self.attempts * self.timeout + waits

    @staticmethod
    def retryable_status(status: int) -> bool:
        return status in RETRYABLE_STATUSES

    def should_retry(self, *, idempotent: bool, attempt: int, status: int | None) -> bool:
        """After failed attempt number ``attempt`` (1-based): try again?

        ``status`` is the HTTP status, or None when there was no answer (connection error or
        timeout).
        """
        if not idempotent or attempt >= self.attempts:
            return False
        return status is None or self.retryable_status(status)
