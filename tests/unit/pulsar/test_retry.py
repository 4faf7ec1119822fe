"""The retry policy (pure): delays, jitter, decisions, bounds and validation."""

from __future__ import annotations

import random

import pytest

from gateway.pulsar.retry import RetryPolicy


def test_retry_policy_delays_grow_and_cap() -> None:
    p = RetryPolicy(retries=6, base_delay=0.1, max_delay=1.0, multiplier=2, jitter=0)
    assert [p.delay(n) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_retry_policy_jitter_stays_in_band() -> None:
    p = RetryPolicy(base_delay=1.0, max_delay=1.0, jitter=0.2)
    rng = random.Random(1)
    delays = [p.delay(1, rng) for _ in range(200)]
    assert all(0.8 <= d <= 1.2 for d in delays)
    assert max(delays) - min(delays) > 0.1  # it really spreads


def test_retry_policy_decisions() -> None:
    p = RetryPolicy(retries=2)
    assert p.attempts == 3
    assert p.should_retry(idempotent=True, attempt=1, status=None)
    assert p.should_retry(idempotent=True, attempt=2, status=503)
    assert not p.should_retry(idempotent=True, attempt=3, status=503)  # budget spent
    assert not p.should_retry(idempotent=False, attempt=1, status=None)
    for status in (400, 401, 404, 409, 412):
        assert not p.should_retry(idempotent=True, attempt=1, status=status)


def test_worst_case_bounds_attempts_and_waits() -> None:
    p = RetryPolicy(retries=3, timeout=2.0, base_delay=0.5, max_delay=1.0, jitter=0.1)
    # 4 attempts x 2 s + waits (0.5 + 1.0 + 1.0) x 1.1
    assert p.worst_case_seconds() == pytest.approx(8.0 + 2.5 * 1.1)


@pytest.mark.parametrize(
    "kwargs",
    [{"retries": -1}, {"timeout": 0}, {"multiplier": 0.5}, {"jitter": 1.0}, {"base_delay": -1}],
)
def test_retry_policy_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
