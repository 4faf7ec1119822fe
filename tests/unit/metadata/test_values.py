"""gateway/metadata/values.py: the values the metadata store's roles take and return."""

from __future__ import annotations

from gateway.metadata.values import DrainRecord, by_queue


def test_by_queue_keys_drains_by_queue_and_topic() -> None:
    record = DrainRecord((1, 2))
    assert by_queue("q", {"t1": record}) == {("q", "t1"): record}
    assert by_queue("q", None) == {}
