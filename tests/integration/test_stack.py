"""The local stack itself: Pulsar's admin API, its binary protocol, and its ZooKeeper.

These are the services every other integration test (and the gateway) builds on, so they check
the properties the gateway relies on: the default namespace exists, auto-created topics work with
Shared subscriptions and keep message properties, and ZooKeeper accepts reads and writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pulsar
import pytest
from kazoo.client import KazooClient

from tests.conftest import StackEndpoints

pytestmark = pytest.mark.integration

RECEIVE_TIMEOUT_MS = 30_000


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def pulsar_client(pulsar_stack: StackEndpoints) -> Iterator[pulsar.Client]:
    client = pulsar.Client(
        pulsar_stack.broker_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        yield client
    finally:
        client.close()


def test_admin_api_lists_the_default_namespace(pulsar_stack: StackEndpoints) -> None:
    with httpx.Client(base_url=pulsar_stack.web_url, timeout=10) as admin:
        clusters = admin.get("/admin/v2/clusters")
        namespaces = admin.get("/admin/v2/namespaces/public")
    assert clusters.status_code == 200
    assert "standalone" in clusters.json()
    assert namespaces.status_code == 200
    assert "public/default" in namespaces.json()


def test_shared_subscription_receives_message_with_properties(
    pulsar_stack: StackEndpoints, pulsar_client: pulsar.Client
) -> None:
    topic_name = _unique("stack-test")
    topic = f"persistent://public/default/{topic_name}"
    properties = {"content-type": "text/plain", "x-unicode": "héllo wörld", "empty": ""}
    body = b"\x00binary\xffpayload"
    try:
        # Subscribe first: a new subscription starts at the end of the topic.
        consumer = pulsar_client.subscribe(
            topic, "stack-test-sub", consumer_type=pulsar.ConsumerType.Shared
        )
        producer = pulsar_client.create_producer(topic)
        message_id = producer.send(body, properties=properties)

        received = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
        consumer.acknowledge(received)

        assert received.data() == body
        assert received.properties() == properties
        assert received.message_id() == message_id
        producer.close()
        consumer.close()
    finally:
        with httpx.Client(base_url=pulsar_stack.web_url, timeout=30) as admin:
            admin.delete(
                f"/admin/v2/persistent/public/default/{topic_name}", params={"force": True}
            )


def test_zookeeper_create_read_delete(pulsar_stack: StackEndpoints) -> None:
    path = "/" + _unique("stack-test")
    zk = KazooClient(hosts=pulsar_stack.zookeeper, timeout=10)
    zk.start(timeout=15)
    try:
        zk.create(f"{path}/child", b"payload \x00\xff", makepath=True)
        data, stat = zk.get(f"{path}/child")
        assert data == b"payload \x00\xff"
        assert stat.version == 0
        assert zk.get_children(path) == ["child"]

        zk.delete(path, recursive=True)
        assert zk.exists(path) is None
    finally:
        if zk.exists(path) is not None:
            zk.delete(path, recursive=True)
        zk.stop()
        zk.close()
