"""Redeliveries: which messages come back marked redelivered, and what it costs to know."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.backend.pulsar.redeliveries import Redeliveries
from gateway.pulsar.ids import MessageId


@dataclass
class FakeReceived:
    """What Redeliveries reads of a ReceivedMessage, counting message-id reads (the costly
    part: five calls into pulsar-client each)."""

    entry: int
    redelivery_count: int = 0
    topic: str = "persistent://t/n/q"
    id_reads: list[int] = field(default_factory=list)

    @property
    def message_id(self) -> MessageId:
        self.id_reads.append(self.entry)
        return MessageId(ledger_id=1, entry_id=self.entry, batch_index=-1, partition=-1)


def test_first_deliveries_are_not_redelivered_and_read_no_message_id() -> None:
    redeliveries = Redeliveries()
    messages = [FakeReceived(n) for n in range(3)]
    assert [redeliveries.delivered(m) for m in messages] == [False] * 3
    assert [m.id_reads for m in messages] == [[], [], []]


def test_a_requeued_message_comes_back_redelivered_once() -> None:
    redeliveries = Redeliveries()
    first = FakeReceived(7)
    redeliveries.delivered(first)
    redeliveries.requeued(first)
    assert redeliveries.seen(FakeReceived(7))
    assert redeliveries.delivered(FakeReceived(7)) is True
    # Acknowledged this time: a later delivery of the same id (it cannot happen in Pulsar,
    # but the record must not linger) is not marked.
    assert redeliveries.delivered(FakeReceived(7)) is False
    assert len(redeliveries) == 0


def test_pulsar_counted_redeliveries_are_marked_and_clear_the_record() -> None:
    redeliveries = Redeliveries()
    nacked = FakeReceived(3)
    redeliveries.requeued(nacked)  # a nack with requeue: recorded, and Pulsar counts it too
    assert redeliveries.delivered(FakeReceived(3, redelivery_count=1)) is True
    assert len(redeliveries) == 0
    assert redeliveries.delivered(FakeReceived(4, redelivery_count=2)) is True


def test_filtered_messages_are_forgotten() -> None:
    redeliveries = Redeliveries()
    redeliveries.requeued(FakeReceived(1))
    redeliveries.forget(FakeReceived(1))
    assert not redeliveries.seen(FakeReceived(1))


def test_the_record_is_bounded_oldest_first() -> None:
    redeliveries = Redeliveries(limit=2)
    for entry in (1, 2, 3):
        redeliveries.requeued(FakeReceived(entry))
    assert [redeliveries.seen(FakeReceived(n)) for n in (1, 2, 3)] == [False, True, True]
