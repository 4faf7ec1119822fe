"""The Pulsar source's own calls, driven directly (no Spark): what Spark's driver and its
executors would call, against the real broker."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from gateway.rollup.pulsar_source import (
    ROW_FIELDS,
    SourceOptions,
    UsageEventStreamReader,
)
from gateway.server.usage_publisher import usage_schema
from tests.conftest import StackEndpoints
from tests.support.usage_events import EventProducer, event

pytestmark = pytest.mark.integration

T0 = 1_767_225_600_000


@pytest.fixture
def topic_name(pulsar_stack: StackEndpoints) -> Iterator[str]:
    name = f"source-{uuid.uuid4().hex[:8]}"
    yield name
    for suffix in ("", "/partitions"):
        httpx.delete(
            f"{pulsar_stack.web_url}/admin/v2/persistent/public/default/{name}{suffix}",
            params={"force": "true"},
            timeout=30,
        )


def backlog(stack: StackEndpoints, name: str) -> int:
    stats = httpx.get(
        f"{stack.web_url}/admin/v2/persistent/public/default/{name}/stats", timeout=30
    ).json()
    return int(stats["subscriptions"]["rollup"]["msgBacklog"])


def read_all(reader: UsageEventStreamReader, start: dict[str, str], end: dict[str, str]) -> list:
    rows = []
    for part in reader.partitions(start, end):
        rows.extend(reader.read(part))
    return [dict(zip(ROW_FIELDS, row, strict=True)) for row in rows]


def test_batches_are_contiguous_replayable_and_skip_malformed_events(
    pulsar_stack: StackEndpoints, topic_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = f"persistent://public/default/{topic_name}"
    producer = EventProducer(pulsar_stack.broker_url, topic)
    # A second producer that batches: five events in one entry.
    batching = producer.client.create_producer(
        topic,
        schema=usage_schema(),
        batching_enabled=True,
        batching_max_messages=5,
        batching_max_publish_delay_ms=60_000,
    )
    reader = UsageEventStreamReader(
        SourceOptions(service_url=pulsar_stack.broker_url, topic=topic, subscription="rollup")
    )
    try:
        for i in range(5):
            batching.send_async(event(i, vhost="v", start_ms=T0 + i), None)
        batching.flush()
        producer.send([event(5, vhost="v", start_ms=T0 + 5)])
        bad_id = producer.send_raw(b"\xff not an event")
        producer.send([event(6, vhost="v", start_ms=T0 + 6)])

        start = reader.initialOffset()
        assert list(start) == [topic]
        end = reader.latestOffset(start, ReadAllAvailable())
        with caplog.at_level(logging.WARNING, logger="gateway.rollup.source"):
            first = read_all(reader, start, end)
        assert [row["sequence"] for row in first] == [0, 1, 2, 3, 4, 5, 6]
        assert f"message id {bad_id}" in caplog.text
        # A replay of the same range reads the same events.
        assert read_all(reader, start, end) == first

        # The next range starts right after the last one, inside or outside a batch.
        for i in range(7, 10):
            batching.send_async(event(i, vhost="v", start_ms=T0 + i), None)
        batching.flush()
        producer.send([event(10, vhost="v", start_ms=T0 + 10)])
        following = reader.latestOffset(end, ReadAllAvailable())
        assert [row["sequence"] for row in read_all(reader, end, following)] == [7, 8, 9, 10]
        # Nothing new: no partition to read.
        assert reader.latestOffset(following, ReadAllAvailable()) == following
        assert reader.partitions(following, following) == []

        # commit moves the durable subscription: nothing is left in its backlog.
        # (pulsar-client sends acknowledgements in groups, every 100 ms.)
        reader.commit(following)
        deadline = time.monotonic() + 10
        while backlog(pulsar_stack, topic_name) != 0:
            assert time.monotonic() < deadline, "the subscription did not move"
            time.sleep(0.1)
    finally:
        reader.stop()
        producer.close()


def test_each_partition_of_a_partitioned_topic_is_its_own_range(
    pulsar_stack: StackEndpoints, topic_name: str
) -> None:
    created = httpx.put(
        f"{pulsar_stack.web_url}/admin/v2/persistent/public/default/{topic_name}/partitions",
        json=2,
        timeout=30,
    )
    assert created.status_code in (200, 204), created.text
    topic = f"persistent://public/default/{topic_name}"
    producer = EventProducer(pulsar_stack.broker_url, topic)
    reader = UsageEventStreamReader(
        SourceOptions(service_url=pulsar_stack.broker_url, topic=topic, subscription="rollup")
    )
    try:
        for i in range(20):
            producer.events.send(event(i, vhost="v", start_ms=T0 + i), partition_key=f"key-{i}")
        start = reader.initialOffset()
        assert sorted(start) == [f"{topic}-partition-0", f"{topic}-partition-1"]
        end = reader.latestOffset(start, ReadAllAvailable())
        parts = reader.partitions(start, end)
        assert len(parts) == 2  # 20 keys: both partitions got some
        rows = read_all(reader, start, end)
        assert sorted(row["sequence"] for row in rows) == list(range(20))
    finally:
        reader.stop()
        producer.close()


def test_starting_at_latest_skips_what_is_already_there(
    pulsar_stack: StackEndpoints, topic_name: str
) -> None:
    topic = f"persistent://public/default/{topic_name}"
    producer = EventProducer(pulsar_stack.broker_url, topic)
    options = SourceOptions(
        service_url=pulsar_stack.broker_url,
        topic=topic,
        subscription="rollup",
        starting_offsets="latest",
    )
    reader = UsageEventStreamReader(options)
    try:
        producer.send([event(0, vhost="v", start_ms=T0)])
        start = reader.initialOffset()
        producer.send([event(1, vhost="v", start_ms=T0 + 1)])
        end = reader.latestOffset(start, ReadAllAvailable())
        assert [row["sequence"] for row in read_all(reader, start, end)] == [1]
    finally:
        reader.stop()
        producer.close()
