"""Queue churn leaves nothing behind (issue 18): reply queues, server-named exclusive queues
and auto-delete queues declared, consumed and deleted over and over, some with a message,
leave no Pulsar subscription and no znode once the leader's rounds have run; and a queue
nobody publishes to costs no Pulsar topic at all (lazy subscriptions, docs/fleet.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from gateway.backend.pulsar.backend import PulsarBackend
from gateway.metadata.paths import Layout
from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_gateway import backend_factory, fresh_namespace, stack_config

pytestmark = pytest.mark.integration

CYCLES = 45  # 15 of each kind


class Replica:
    def __init__(self, gateway: GatewayInThread, namespace: str, stack: Any) -> None:
        self.gateway = gateway
        self.namespace = f"public/{namespace}"
        self.admin = httpx.Client(base_url=stack.web_url, timeout=30)
        self.zookeeper = KazooClient(hosts=stack.zookeeper, timeout=10)
        self.zookeeper.start()

    def connection(self) -> Any:
        params = pika.ConnectionParameters(host="127.0.0.1", port=self.gateway.port)
        return pika.BlockingConnection(params)

    def topics(self) -> list[str]:
        response = self.admin.get(f"/admin/v2/persistent/{self.namespace}")
        response.raise_for_status()
        return list(response.json())

    def subscriptions(self) -> dict[str, list[str]]:
        """topic -> its subscriptions (topics without any left out: Pulsar deletes those)."""
        found: dict[str, list[str]] = {}
        for topic in self.topics():
            path = topic.removeprefix("persistent://")
            response = self.admin.get(f"/admin/v2/persistent/{path}/subscriptions")
            if response.status_code == 404:
                continue  # deleted meanwhile
            response.raise_for_status()
            if response.json():
                found[topic] = sorted(response.json())
        return found

    def znodes(self) -> int:
        """Every znode of the vhost's metadata, bucket nodes left out (made on first use and
        kept, like folders)."""
        root = Layout().namespace(self.namespace)

        def count(path: str, depth: int) -> int:
            try:
                children = self.zookeeper.get_children(path)
            except NoNodeError:
                return 0  # deleted since its parent was listed
            own = 0 if depth == 2 else 1  # depth 2: a bucket
            return own + sum(count(f"{path}/{child}", depth + 1) for child in children)

        return count(root, 0)

    def footprint(self) -> dict[str, int]:
        """The per-queue state the replica keeps (PulsarVirtualHost.footprint)."""

        def read() -> dict[str, int]:
            backend = self.gateway.server._backend
            assert isinstance(backend, PulsarBackend)
            return backend._vhosts[self.namespace].footprint()

        result: dict[str, int] = self.gateway.call(read)
        return result

    def close(self) -> None:
        self.admin.close()
        self.zookeeper.stop()
        self.zookeeper.close()


@pytest.fixture
def replica(pulsar_stack: Any) -> Iterator[Replica]:
    with fresh_namespace(pulsar_stack) as namespace:
        config = stack_config(
            pulsar_stack.web_url, pulsar_stack.broker_url, pulsar_stack.zookeeper, namespace
        )
        with GatewayInThread(backend_factory=backend_factory(config)) as gateway:
            running = Replica(gateway, namespace, pulsar_stack)
            try:
                yield running
            finally:
                running.close()


def wait_for(condition: Any, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_declare_and_bind_without_a_message_create_nothing_in_pulsar(replica: Replica) -> None:
    channel = replica.connection().channel()
    channel.exchange_declare("quiet", "direct")
    channel.queue_declare("silent", durable=True)
    channel.queue_bind("silent", "quiet", "k")
    channel.queue_declare("", exclusive=True)
    assert replica.subscriptions() == {}
    channel.confirm_delivery()
    channel.basic_publish("quiet", "k", b"first")
    subscribed = replica.subscriptions()
    assert list(subscribed) == [f"persistent://{replica.namespace}/quiet__k"]
    _, _, body = channel.basic_get("silent", auto_ack=True)
    deadline = time.monotonic() + 10
    while body is None:
        assert time.monotonic() < deadline, "the message never arrived"
        _, _, body = channel.basic_get("silent", auto_ack=True)
    assert body == b"first"
    channel.queue_delete("silent")
    assert replica.subscriptions() == {}


def test_queue_churn_leaks_no_subscription_and_no_znode(replica: Replica) -> None:
    """Declare -> consume -> delete cycles of the three short-lived kinds, every other one
    with a reply published to it (the RPC pattern), on a fresh vhost: afterwards its
    subscriptions, znodes and the replica's per-queue state are what they were before (the
    leader sweeps the keys of the deleted reply queues within two of its rounds)."""
    server = replica.connection().channel()
    server.confirm_delivery()
    server.queue_declare("work")  # something that stays, in both counts
    before_znodes = replica.znodes()
    before_subscriptions = replica.subscriptions()
    before_footprint = replica.footprint()
    for cycle in range(CYCLES):
        connection = replica.connection()
        channel = connection.channel()
        kind = ("reply", "auto-delete", "exclusive")[cycle % 3]
        declared = channel.queue_declare(
            "", exclusive=kind != "auto-delete", auto_delete=kind == "auto-delete"
        )
        queue = declared.method.queue
        received: list[bytes] = []
        tag = channel.basic_consume(queue, lambda ch, m, p, body, got=received: got.append(body))
        if cycle % 2 == 0:
            server.basic_publish("", queue, b"reply-%d" % cycle)
            deadline = time.monotonic() + 10
            while not received:
                assert time.monotonic() < deadline, f"cycle {cycle}: no reply"
                connection.process_data_events(time_limit=0.05)
            channel.basic_ack(multiple=True)
        if kind == "reply":
            channel.queue_delete(queue)
        elif kind == "auto-delete":
            channel.basic_cancel(tag)  # its last consumer: the queue goes
        connection.close()  # an exclusive queue goes with its connection
    wait_for(
        lambda: replica.subscriptions() == before_subscriptions,
        "subscriptions left behind by the churn",
    )
    wait_for(lambda: replica.znodes() == before_znodes, "znodes left behind by the churn")
    wait_for(
        lambda: replica.footprint() == before_footprint,
        f"state left in the replica: {replica.footprint()} (before: {before_footprint})",
    )
