"""Redeliveries: which messages come back marked redelivered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from gateway.backend.pulsar.redeliveries import Redeliveries
from gateway.pulsar.consumer import ReceivedMessage


@dataclass
class FakeReceived:
    """What Redeliveries reads of a ReceivedMessage."""

    entry: int
    redelivery_count: int = 0
    topic: str = "persistent://t/n/q"

    @property
    def id_bytes(self) -> bytes:
        return self.entry.to_bytes(8, "big")


def received(
    entry: int, *, redelivery_count: int = 0, topic: str = "persistent://t/n/q"
) -> ReceivedMessage:
    return cast(ReceivedMessage, FakeReceived(entry, redelivery_count, topic))


def test_first_deliveries_are_not_redelivered() -> None:
    redeliveries = Redeliveries()
    assert [redeliveries.delivered("q", received(n))[1] for n in range(3)] == [False] * 3


def test_an_unsettled_message_that_comes_again_is_redelivered() -> None:
    # Requeued by the gateway, or sent again by the broker after a reconnection.
    redeliveries = Redeliveries()
    redeliveries.delivered("q", received(7))
    assert redeliveries.seen("q", received(7))
    assert redeliveries.delivered("q", received(7))[1] is True


def test_a_settled_message_is_forgotten() -> None:
    redeliveries = Redeliveries()
    key, _ = redeliveries.delivered("q", received(7))
    redeliveries.settled(key)
    assert len(redeliveries) == 0
    assert redeliveries.delivered("q", received(7))[1] is False


def test_pulsar_counted_redeliveries_are_marked() -> None:
    redeliveries = Redeliveries()
    assert redeliveries.delivered("q", received(4, redelivery_count=2))[1] is True


def test_the_same_id_on_another_topic_is_another_message() -> None:
    redeliveries = Redeliveries()
    redeliveries.delivered("q", received(1, topic="persistent://t/n/a"))
    assert not redeliveries.seen("q", received(1, topic="persistent://t/n/b"))


def test_the_record_is_bounded_oldest_first() -> None:
    redeliveries = Redeliveries(limit=2)
    for entry in (1, 2, 3):
        redeliveries.delivered("q", received(entry))
    assert [redeliveries.seen("q", received(n)) for n in (1, 2, 3)] == [False, True, True]


def test_each_queue_of_a_shared_topic_has_its_own_record() -> None:
    # Two queues bound to one topic each get the message: the first delivery from the second
    # queue is not a redelivery, and settling it in one queue leaves the other's marked.
    redeliveries = Redeliveries()
    assert redeliveries.delivered("q1", received(5))[1] is False
    key, redelivered = redeliveries.delivered("q2", received(5))
    assert redelivered is False
    redeliveries.settled(key)
    assert redeliveries.seen("q1", received(5))
    assert not redeliveries.seen("q2", received(5))
