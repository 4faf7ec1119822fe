"""Redeliveries: which messages come back marked redelivered."""

from __future__ import annotations

from gateway.backend.pulsar.redeliveries import Redeliveries
from tests.support.received_messages import received


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


# ---------------------------------------------------------------------- the fleet record


def test_another_replicas_record_marks_a_delivery_redelivered() -> None:
    redeliveries = Redeliveries()
    redeliveries.elsewhere = frozenset({("q", "persistent://t/n/q", received(3).id_bytes)})
    assert redeliveries.seen("q", received(3))
    assert redeliveries.delivered("q", received(3))[1] is True
    # Only that message, and only in that queue.
    assert redeliveries.delivered("q", received(4))[1] is False
    assert redeliveries.delivered("other", received(3))[1] is False


def test_a_delivery_is_due_for_the_record_once_outstanding_a_whole_generation() -> None:
    redeliveries = Redeliveries()
    assert redeliveries.tick() is False  # nothing delivered
    redeliveries.delivered("q", received(1))
    assert redeliveries.tick() is False  # delivered during the generation that just ended
    assert redeliveries.tick() is True  # outstanding for a whole one since
    keys, mark = redeliveries.snapshot(10)
    assert keys == [("q", "persistent://t/n/q", received(1).id_bytes)]
    assert redeliveries.unrecorded()  # until the write is confirmed
    redeliveries.recorded(mark)
    assert not redeliveries.unrecorded()
    assert redeliveries.tick() is False and redeliveries.tick() is False  # recorded already


def test_a_delivery_settled_within_a_generation_never_makes_the_record_due() -> None:
    redeliveries = Redeliveries()
    for entry in range(5):
        key, _ = redeliveries.delivered("q", received(entry))
        redeliveries.settled(key)
        assert redeliveries.tick() is False
    assert not redeliveries.unrecorded() and not redeliveries.shrunk


def test_a_delivery_after_a_snapshot_is_not_taken_as_recorded() -> None:
    redeliveries = Redeliveries()
    redeliveries.delivered("q", received(1))
    _, mark = redeliveries.snapshot(10)
    redeliveries.delivered("q", received(2))  # while the write is on its way
    redeliveries.recorded(mark)
    assert redeliveries.unrecorded()
    redeliveries.tick()
    assert redeliveries.tick() is True


def test_settling_a_recorded_delivery_shrinks_the_record() -> None:
    redeliveries = Redeliveries()
    key, _ = redeliveries.delivered("q", received(1))
    redeliveries.recorded(redeliveries.snapshot(10)[1])
    redeliveries.settled(key)
    assert redeliveries.shrunk
    keys, mark = redeliveries.snapshot(10)
    assert keys == []
    redeliveries.recorded(mark)
    assert not redeliveries.shrunk


def test_a_snapshot_holds_the_newest_deliveries() -> None:
    redeliveries = Redeliveries()
    for entry in range(5):
        redeliveries.delivered("q", received(entry))
    redeliveries.delivered("q", received(1))  # delivered again: the newest now
    keys, _ = redeliveries.snapshot(3)
    assert [key[2] for key in keys] == [received(n).id_bytes for n in (1, 4, 3)]


def test_a_count_of_this_replicas_own_giving_back_is_not_a_redelivery() -> None:
    # A retired Basic.Get consumer negatively acknowledges what it read ahead and never
    # delivered; Pulsar counts that as a redelivery, AMQP does not.
    redeliveries = Redeliveries()
    redeliveries.given_back("q", received(5))
    assert not redeliveries.seen("q", received(5, redelivery_count=1))
    key, before = redeliveries.delivered("q", received(5, redelivery_count=1))
    assert before is False
    # Delivered now: given back again (requeued by its consumer), it is a redelivery.
    redeliveries.settled(key)
    assert redeliveries.delivered("q", received(5, redelivery_count=2))[1] is True
    # A count above what this replica gave back is someone else's delivery.
    redeliveries.given_back("q", received(6))
    assert redeliveries.delivered("q", received(6, redelivery_count=2))[1] is True
