"""Error classes, the AMQP mapping, and the retry policy (pure)."""

from __future__ import annotations

import random

import pytest

from gateway.amqp.errors import ChannelError, ConnectionException, ReplyCode
from gateway.pulsar.errors import (
    AdminError,
    Conflict,
    NotFound,
    PreconditionFailed,
    PulsarClientError,
    SendError,
    Unauthorized,
    Unavailable,
    admin_error_for,
    is_transient,
    to_amqp_error,
)
from gateway.pulsar.retry import RetryPolicy


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (404, NotFound),
        (409, Conflict),
        (412, PreconditionFailed),
        (401, Unauthorized),
        (403, Unauthorized),
        (500, Unavailable),
        (503, Unavailable),
        (400, AdminError),
        (405, AdminError),
    ],
)
def test_admin_error_for_status(status: int, cls: type[AdminError]) -> None:
    err = admin_error_for(status, "GET", "/admin/v2/x", "why")
    assert type(err) is cls
    assert (err.status, err.method, err.path, err.reason) == (status, "GET", "/admin/v2/x", "why")
    assert "GET /admin/v2/x" in str(err) and "why" in str(err)


@pytest.mark.parametrize(
    ("err", "code", "soft"),
    [
        (NotFound(404, "GET", "/p", "Topic not found"), ReplyCode.NOT_FOUND, True),
        (Unauthorized(403, "GET", "/p", "no"), ReplyCode.ACCESS_REFUSED, True),
        (PreconditionFailed(412, "DELETE", "/p", "active consumers"), 406, True),
        (Conflict(409, "PUT", "/p", "exists"), ReplyCode.RESOURCE_LOCKED, True),
        (Unavailable(None, "GET", "/p", "refused"), ReplyCode.INTERNAL_ERROR, False),
        (Unavailable(503, "GET", "/p", "loading"), ReplyCode.INTERNAL_ERROR, False),
        (AdminError(400, "GET", "/p", "bad"), ReplyCode.INTERNAL_ERROR, False),
        (PulsarClientError("TopicNotFound"), ReplyCode.NOT_FOUND, True),
        (PulsarClientError("AuthorizationError"), ReplyCode.ACCESS_REFUSED, True),
        (SendError("MessageTooBig"), ReplyCode.PRECONDITION_FAILED, True),
        (PulsarClientError("ConsumerBusy"), ReplyCode.RESOURCE_LOCKED, True),
        (SendError("Timeout"), ReplyCode.INTERNAL_ERROR, False),
        (RuntimeError("boom"), ReplyCode.INTERNAL_ERROR, False),
    ],
)
def test_to_amqp_error(err: Exception, code: int, soft: bool) -> None:
    amqp = to_amqp_error(err, "queue 'q' in vhost '/'")
    assert amqp.reply_code == code
    assert isinstance(amqp, ChannelError if soft else ConnectionException)
    assert amqp.is_hard is not soft
    assert "queue 'q' in vhost '/'" in amqp.reply_text
    assert len(amqp.reply_text.encode()) <= 255


def test_reply_text_keeps_pulsar_reason() -> None:
    amqp = to_amqp_error(NotFound(404, "GET", "/p", "Subscription q not found"))
    assert amqp.reply_text == "NOT_FOUND - Subscription q not found"


def test_is_transient() -> None:
    assert is_transient(Unavailable(None, "GET", "/", ""))
    assert is_transient(SendError("Timeout"))
    assert not is_transient(SendError("MessageTooBig"))
    assert not is_transient(NotFound(404, "GET", "/", ""))


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
