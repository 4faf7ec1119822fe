"""gateway/management/queues.py: a queue's counts with what its consumers may hold, and the
consumer tags its consumers give it."""

from __future__ import annotations

from typing import Any

from gateway.backend.pulsar.queue_info import QueueCounts
from gateway.management.queues import with_counts


def consumer(tag: str, prefetch: int, **more: Any) -> dict[str, Any]:
    return {
        "consumer_tag": tag,
        "ack_required": True,
        "prefetch_count": prefetch,
        "exclusive": False,
        "activity_status": "up",
        **more,
    }


def shown(counts: QueueCounts, consumers: list[dict[str, Any]] | None) -> dict[str, Any]:
    item: dict[str, Any] = {"exclusive_consumer_tag": None, "single_active_consumer_tag": None}
    with_counts(item, counts, consumers)
    return item


def test_what_was_read_ahead_is_ready_not_unacknowledged() -> None:
    # Pulsar dispatched 9 of 10 to the replicas; the one consumer may hold only 3 of them.
    counts = QueueCounts(messages=10, ready=1, unacknowledged=9)
    item = shown(counts, [consumer("a", 3)])
    assert (item["messages"], item["messages_unacknowledged"], item["messages_ready"]) == (
        10,
        3,
        7,
    )
    # Within what the consumers may hold, and without consumers, Pulsar's counts stand.
    assert shown(counts, [consumer("a", 3), consumer("b", 0)])["messages_unacknowledged"] == 9
    assert shown(counts, [consumer("a", 5), consumer("b", 5)])["messages_unacknowledged"] == 9
    assert shown(counts, None)["messages_unacknowledged"] == 9
    # A no-ack consumer holds nothing: what was dispatched to it and not sent is ready.
    no_ack = consumer("n", 0, ack_required=False)
    assert shown(counts, [no_ack])["messages_ready"] == 10


def test_the_exclusive_and_the_single_active_consumers_tags() -> None:
    counts = QueueCounts()
    item = shown(counts, [consumer("x", 1, exclusive=True)])
    assert (item["exclusive_consumer_tag"], item["single_active_consumer_tag"]) == ("x", None)
    line = [
        consumer("w", 1, activity_status="waiting"),
        consumer("s", 1, activity_status="single_active"),
    ]
    item = shown(counts, line)
    assert (item["exclusive_consumer_tag"], item["single_active_consumer_tag"]) == (None, "s")
