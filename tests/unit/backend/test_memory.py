"""The in-memory queue's count: expired messages leave first, and a queue where nothing can
expire (no x-message-ttl, no message with an ``expiration``) is not walked at all. The walk
sorts the whole queue, and Basic.Get counts after every take: walked each time, a Get cost
~1 ms of CPU with a few thousand messages queued (bench/bench_session.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.amqp.properties import MessageProperties, encode_properties
from gateway.backend import memory
from gateway.backend.interface import Message
from gateway.backend.memory import MemoryQueue

START_MS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = START_MS

    def __call__(self) -> int:
        return self.now


def message(body: bytes, expiration: str | None = None) -> Message:
    return Message("", "q", encode_properties(MessageProperties(expiration=expiration)), body)


def not_walked(*_args: Any) -> Any:
    raise AssertionError("the queue was walked")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(memory, "now_ms", clock)
    return clock


def test_count_removes_expired_messages_then_stops_walking(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead: list[tuple[bytes, str]] = []
    queue = MemoryQueue("q", lambda _queue, message, reason: dead.append((message.body, reason)))
    queue.push(message(b"plain"))
    assert not queue.expiring
    queue.push(message(b"short", expiration="100"))
    assert queue.expiring
    assert queue.count() == 2
    assert queue.expiring  # "short" may still expire

    clock.now += 101
    assert queue.count() == 1
    assert dead == [(b"short", "expired")]
    assert not queue.expiring  # what is left cannot expire
    monkeypatch.setattr(type(queue.ready), "keep", not_walked)  # slotted: on the class
    assert queue.count() == 1


def test_a_requeued_message_with_an_expiration_is_looked_at(clock: Clock) -> None:
    dead: list[bytes] = []
    queue = MemoryQueue("q", lambda _queue, message, _reason: dead.append(message.body))
    queue.push(message(b"short", expiration="100"))
    delivery = queue.take()
    assert delivery is not None
    assert queue.count() == 0
    assert not queue.expiring
    clock.now += 101
    queue.requeue(delivery.message, delivery.enqueued, delivery.place)
    assert queue.expiring
    assert queue.count() == 0
    assert dead == [b"short"]


def test_a_queue_with_a_message_ttl_is_always_looked_at(clock: Clock) -> None:
    dead: list[bytes] = []
    queue = MemoryQueue("q", lambda _queue, message, _reason: dead.append(message.body), ttl=50)
    queue.push(message(b"a"))
    assert queue.count() == 1
    clock.now += 51
    assert queue.count() == 0
    assert dead == [b"a"]
