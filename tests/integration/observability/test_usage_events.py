"""Usage events from a real gateway process, read back from the real Pulsar topic."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pika
import pulsar
import pytest

from gateway.observability.usage_event import AVRO_SCHEMA, UsageEvent
from gateway.server.usage_publisher import pulsar_sequence_id, usage_schema
from tests.support.fleet import Fleet

pytestmark = pytest.mark.integration


def read_events(broker_url: str, topic: str, want: int, timeout: float = 60.0) -> list[UsageEvent]:
    """Every event on ``topic`` until ``want`` published messages are accounted for."""
    client = pulsar.Client(broker_url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        events: list[UsageEvent] = []
        deadline = time.monotonic() + timeout
        while sum(e.published_messages for e in events) < want:
            assert time.monotonic() < deadline, f"events so far: {events}"
            try:
                message = reader.read_next(timeout_millis=1000)
            except pulsar.Timeout:
                continue
            events.append(UsageEvent.from_json(message.data()))
        # Anything else already there (a later window) is read too.
        while True:
            try:
                events.append(UsageEvent.from_json(reader.read_next(timeout_millis=500).data()))
            except pulsar.Timeout:
                return events
    finally:
        client.close()


def test_usage_events_count_the_traffic_with_a_schema_and_deduplication(
    tmp_path: Path, pulsar_stack: Any, namespace: str, chroot: str
) -> None:
    topic = f"persistent://public/{namespace}/usage"
    fleet = Fleet(
        tmp_path,
        pulsar_stack,
        namespace,
        zookeeper=chroot,
        extra_config=f"usageEventsTopic={topic}\nusageEventsIntervalSeconds=1\n"
        "amqpNodeName=rabbit@usage-test\n",
    )
    try:
        (replica,) = fleet.replicas(1)
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", replica.port))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("billed")
        for _ in range(25):
            channel.basic_publish("", "billed", b"z" * 40)
        got = 0
        while got < 10:
            method, _props, _body = channel.basic_get("billed", auto_ack=True)
            got += method is not None
        connection.close()
        events = read_events(pulsar_stack.broker_url, topic, want=25)
    finally:
        fleet.close()
    mine = [e for e in events if e.vhost == "/"]
    assert sum(e.published_messages for e in mine) == 25
    assert sum(e.published_bytes for e in mine) == 25 * 40
    assert sum(e.routed_messages for e in mine) == 25
    assert sum(e.delivered_messages for e in mine) == 10
    assert sum(e.acknowledged_messages for e in mine) == 10  # auto-ack gets
    assert max(e.peak_connections for e in mine) == 1
    assert all(e.namespace == f"public/{namespace}" for e in mine)
    replicas = {e.replica for e in events}
    assert len(replicas) == 1 and replicas.pop().startswith("rabbit@usage-test.")
    # Unique ids, sequences 0, 1, 2, ... in order, windows back to back.
    assert [e.sequence for e in events] == list(range(len(events)))
    assert len({e.event_id for e in events}) == len(events)
    for before, after in itertools.pairwise(events):
        assert after.window_start_ms >= before.window_start_ms
    with httpx.Client(base_url=pulsar_stack.web_url, timeout=30) as admin:
        schema = admin.get(f"/admin/v2/schemas/public/{namespace}/usage/schema").json()
        assert schema["type"] == "JSON"
        assert json.loads(schema["data"]) == AVRO_SCHEMA
        dedup = admin.get(f"/admin/v2/namespaces/public/{namespace}/deduplication")
        assert dedup.json() is True


def test_a_retried_send_is_stored_once(
    tmp_path: Path, pulsar_stack: Any, namespace: str, chroot: str
) -> None:
    """What the gateway relies on: in its namespace, a send repeated with the same producer
    name and sequence id is dropped by the broker."""
    topic = f"persistent://public/{namespace}/usage"
    fleet = Fleet(
        tmp_path,
        pulsar_stack,
        namespace,
        zookeeper=chroot,
        extra_config=f"usageEventsTopic={topic}\nusageEventsIntervalSeconds=1\n",
    )
    try:
        (replica,) = fleet.replicas(1)
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", replica.port))
        connection.channel().basic_publish("", "nowhere", b"1")
        connection.close()
        read_events(pulsar_stack.broker_url, topic, want=1)  # the namespace is prepared
    finally:
        fleet.close()
    event = UsageEvent(
        event_id="retry:0",
        replica="retry",
        sequence=0,
        vhost="/x",
        namespace="public/x",
        window_start_ms=1,
        window_end_ms=2,
        published_messages=1000,
    )
    client = pulsar.Client(pulsar_stack.broker_url)
    try:
        producer = client.create_producer(topic, producer_name="retry", schema=usage_schema())
        producer.send(event, sequence_id=pulsar_sequence_id(event))
        producer.send(event, sequence_id=pulsar_sequence_id(event))  # the retry
        producer.close()
    finally:
        client.close()
    events = read_events(pulsar_stack.broker_url, topic, want=1001)
    assert [e.event_id for e in events].count("retry:0") == 1
