"""Message TTL rules (gateway/model/ttl.py) against RabbitMQ's (docs/ttl.md, rabbit_basic)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.fieldtable import Field
from gateway.model.ttl import (
    MAX_EXPIRY_MS,
    ZERO_TTL_GRACE_MS,
    effective_ttl,
    expiration_error,
    is_expired,
    parse_expiration,
    queue_expires,
    queue_message_ttl,
)


def test_expiration_errors_in_rabbitmqs_words() -> None:
    assert expiration_error("60000") is None
    assert expiration_error("0") is None
    assert expiration_error("") == "no_integer"
    assert expiration_error("soon") == "no_integer"
    assert expiration_error("10s") == '{leftover_string,"s"}'
    assert expiration_error("-1") == "{value_negative,-1}"
    assert expiration_error(str(MAX_EXPIRY_MS + 1)) == f"{{value_too_large,{MAX_EXPIRY_MS + 1}}}"


@given(st.integers(min_value=0, max_value=MAX_EXPIRY_MS))
def test_every_valid_ttl_parses_back(ttl: int) -> None:
    assert expiration_error(str(ttl)) is None
    assert parse_expiration(str(ttl)) == ttl
    assert parse_expiration(str(ttl).encode()) == ttl


@given(
    queue_ttl=st.none() | st.integers(min_value=0, max_value=10**9),
    message_ttl=st.none() | st.integers(min_value=0, max_value=10**9),
)
def test_the_lower_ttl_wins(queue_ttl: int | None, message_ttl: int | None) -> None:
    expiration = None if message_ttl is None else str(message_ttl)
    present = [t for t in (queue_ttl, message_ttl) if t is not None]
    assert effective_ttl(queue_ttl, expiration) == (min(present) if present else None)


def test_an_invalid_expiration_of_a_native_message_is_no_ttl() -> None:
    assert effective_ttl(5000, "tomorrow") == 5000
    assert effective_ttl(None, "tomorrow") is None


@given(
    enqueued=st.integers(min_value=0, max_value=10**12),
    ttl=st.integers(min_value=1, max_value=10**6),
    age=st.integers(min_value=-1000, max_value=10**7),
)
def test_expired_once_older_than_the_ttl(enqueued: int, ttl: int, age: int) -> None:
    assert is_expired(enqueued, ttl, enqueued + age) == (age > ttl)
    assert not is_expired(enqueued, None, enqueued + age)


def test_ttl_zero_leaves_the_hand_over_time() -> None:
    assert not is_expired(1000, 0, 1000 + ZERO_TTL_GRACE_MS)
    assert is_expired(1000, 0, 1000 + ZERO_TTL_GRACE_MS + 1)


def test_the_queue_ttl_comes_from_its_arguments() -> None:
    assert queue_message_ttl({}) is None
    assert queue_message_ttl({"x-message-ttl": Field("b", 0)}) == 0
    assert queue_message_ttl({"x-message-ttl": Field("l", 60000)}) == 60000


def test_the_queue_expiry_comes_from_its_arguments() -> None:
    assert queue_expires({}) is None
    assert queue_expires({"x-expires": Field("I", 1500)}) == 1500
