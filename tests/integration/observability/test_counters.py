"""Exact counter values for known traffic, on real gateway processes (pika clients)."""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any

import httpx
import pika
import pytest

from tests.integration.observability import traffic
from tests.integration.observability.scrape import (
    Samples,
    metrics_port,
    scrape,
    value,
    wait_metrics,
)
from tests.support.fleet import Fleet

pytestmark = pytest.mark.integration

G = "rabbitmq_global_"


def closed(count: int) -> Any:
    return lambda s: value(s, "rabbitmq_connections_closed_total") >= count


def assert_publisher_counts(samples: Samples) -> None:
    sent = traffic.PUBLISHED + traffic.RETURNED + traffic.DROPPED
    assert value(samples, f"{G}messages_received_total") == sent
    assert value(samples, f"{G}messages_received_confirm_total") == sent
    assert value(samples, f"{G}messages_routed_total") == traffic.PUBLISHED
    assert value(samples, f"{G}messages_unroutable_returned_total") == traffic.RETURNED
    assert value(samples, f"{G}messages_unroutable_dropped_total") == traffic.DROPPED
    # RabbitMQ confirms unroutable messages too (after the Return, for mandatory ones).
    assert value(samples, f"{G}messages_confirmed_total") == sent
    assert value(samples, "rabbitmq_queues_declared_total") == 1
    assert value(samples, "rabbitmq_queues_created_total") == 1
    assert value(samples, "rabbitmq_message_size_bytes_count") == sent
    assert value(samples, "rabbitmq_message_size_bytes_bucket", le="100.0") == sent
    assert value(samples, "rabbitmq_message_size_bytes_sum") == (
        traffic.PUBLISHED * traffic.BODY + (traffic.RETURNED + traffic.DROPPED) * 10
    )
    assert value(samples, "starlight_vhost_published_bytes_total", vhost="/") == (
        traffic.PUBLISHED * traffic.BODY + (traffic.RETURNED + traffic.DROPPED) * 10
    )


def assert_consumer_counts(samples: Samples, seen: traffic.Seen) -> None:
    assert seen.get_auto == traffic.GET_AUTO and seen.get_manual == traffic.GET_MANUAL
    assert value(samples, f"{G}messages_delivered_get_auto_ack_total") == traffic.GET_AUTO
    assert value(samples, f"{G}messages_delivered_get_manual_ack_total") == traffic.GET_MANUAL
    assert value(samples, f"{G}messages_get_empty_total") == seen.get_empty
    assert seen.consumed >= traffic.PUBLISHED - traffic.GET_AUTO - traffic.GET_MANUAL
    assert value(samples, f"{G}messages_delivered_consume_manual_ack_total") == seen.consumed
    assert value(samples, f"{G}messages_delivered_consume_auto_ack_total") == 0
    assert seen.redelivered >= traffic.NACKED
    assert value(samples, f"{G}messages_redelivered_total") == seen.redelivered
    assert seen.acknowledged == traffic.PUBLISHED - traffic.GET_AUTO
    assert value(samples, f"{G}messages_acknowledged_total") == seen.acknowledged
    assert value(samples, f"{G}messages_delivered_total") == (
        seen.get_auto + seen.get_manual + seen.consumed
    )
    assert value(samples, "starlight_vhost_delivered_bytes_total", vhost="/") == (
        seen.bytes_delivered
    )


def test_known_traffic_gives_exact_counters_on_one_replica(fleet: Fleet) -> None:
    (replica,) = fleet.replicas(1)
    port = metrics_port(replica)
    traffic.publish(replica.port)
    seen = traffic.consume(replica.port)
    samples = wait_metrics(port, closed(2))
    assert value(samples, "rabbitmq_connections_opened_total") == 2
    assert value(samples, "rabbitmq_connections_closed_total") == 2
    assert value(samples, "rabbitmq_connections") == 0
    assert value(samples, "rabbitmq_channels_opened_total") == 2
    assert value(samples, "rabbitmq_channels_closed_total") == 2
    assert value(samples, "rabbitmq_channels") == 0
    assert value(samples, "rabbitmq_consumers") == 0
    assert value(samples, f"{G}publishers") == 0
    assert value(samples, "rabbitmq_connection_incoming_bytes_total") > traffic.PUBLISHED * 100
    assert value(samples, "rabbitmq_connection_outgoing_bytes_total") > traffic.PUBLISHED * 100
    assert value(samples, "rabbitmq_identity_info", rabbitmq_endpoint="aggregated") == 1
    assert_publisher_counts(samples)
    assert_consumer_counts(samples, seen)


def test_counts_on_two_replicas_add_up(fleet: Fleet) -> None:
    """Publish through one replica, consume through the other: each counts its own share
    exactly, and the fleet's sum is the traffic."""
    first, second = fleet.replicas(2)
    first_port, second_port = metrics_port(first), metrics_port(second)
    traffic.publish(first.port)
    seen = traffic.consume(second.port)
    publisher = wait_metrics(first_port, closed(1))
    consumer = wait_metrics(second_port, closed(1))
    assert_publisher_counts(publisher)
    assert_consumer_counts(consumer, seen)
    assert value(consumer, f"{G}messages_received_total") == 0
    assert value(publisher, f"{G}messages_delivered_total") == 0
    identities = {
        dict(labels)["rabbitmq_node"]
        for samples in (publisher, consumer)
        for (name, labels) in samples
        if name == "rabbitmq_identity_info"
    }
    assert len(identities) == 1  # both default to rabbit@<host>: same host here
    assert (
        value(publisher, "rabbitmq_connections_opened_total")
        + value(consumer, "rabbitmq_connections_opened_total")
        == 2
    )


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus)")
def test_exposition_passes_promtool(fleet: Fleet) -> None:
    (replica,) = fleet.replicas(1)
    traffic.publish(replica.port)
    text, _ = scrape(metrics_port(replica))
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_queue_gauges_come_from_pulsar_on_the_leader_only(fleet: Fleet, pulsar_stack: Any) -> None:
    """7 messages in a queue, 3 of them held unacknowledged by a client of one replica: the
    vhost's leader exports the queue's depth from Pulsar (messages 7, ready = what Pulsar has
    not dispatched, consumers 1; refreshed every 15 s), the client's replica exports unacked 3;
    the fleet's sums count the queue once."""
    first, second = fleet.replicas(2)
    ports = [metrics_port(first), metrics_port(second)]
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", first.port))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("gauged")
    for index in range(7):
        channel.basic_publish("", "gauged", f"m{index}".encode())
    channel.basic_qos(prefetch_count=3)
    held = []
    for method, _props, _body in channel.consume("gauged", inactivity_timeout=10):
        assert method is not None, "no delivery"
        held.append(method.delivery_tag)
        if len(held) == 3:
            break
    stats = httpx.get(
        f"{pulsar_stack.web_url}/admin/v2/persistent/public/{fleet.namespace}/"
        "amq.default__gauged/stats",
        timeout=10,
    ).json()
    (subscription,) = stats["subscriptions"].values()
    dispatched = subscription["unackedMessages"]
    assert subscription["msgBacklog"] == 7

    def fleet_sum(name: str) -> tuple[float, ...]:
        return tuple(
            sum(
                v
                for (n, labels), v in scrape(port)[1].items()
                if n == name and ("queue", "gauged") in labels
            )
            for port in ports
        )

    deadline = time.monotonic() + 60
    while True:
        messages = fleet_sum("rabbitmq_queue_messages")
        if sorted(messages) == [0, 7]:
            break
        assert time.monotonic() < deadline, f"rabbitmq_queue_messages per replica: {messages}"
        time.sleep(0.5)
    leader = messages.index(7)
    assert fleet_sum("rabbitmq_queue_messages_ready")[leader] == 7 - dispatched
    assert fleet_sum("rabbitmq_queue_consumers") == tuple(
        1 if index == leader else 0 for index in range(2)
    )
    assert fleet_sum("rabbitmq_queue_messages_unacked") == (3, 0)  # first's client holds 3
    assert sorted(value(scrape(port)[1], "rabbitmq_queues") for port in ports) == [0, 1]
    assert (
        value(
            scrape(ports[leader])[1],
            "starlight_leader",
            pulsar_namespace=f"public/{fleet.namespace}",
        )
        == 1
    )
    channel.basic_ack(held[-1], multiple=True)
    connection.close()


def test_a_streams_gauges_count_its_consumers_on_every_replica_and_its_log(
    fleet: Fleet, pulsar_stack: Any
) -> None:
    """A stream with a consumer on each of two replicas: the leader exports consumers 2 and
    the messages in the log (RabbitMQ's metrics count a stream's consumers on every node, and
    its messages as ready), while Declare-Ok still says 0 consumers (rabbit_stream_queue:stat)."""
    first, second = fleet.replicas(2)
    ports = [metrics_port(first), metrics_port(second)]
    connections = [
        pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", replica.port))
        for replica in (first, second)
    ]
    channels = [connection.channel() for connection in connections]
    channels[0].confirm_delivery()
    channels[0].queue_declare("logged", durable=True, arguments={"x-queue-type": "stream"})
    for index in range(5):
        channels[0].basic_publish("", "logged", f"m{index}".encode())
    for channel in channels:
        channel.basic_qos(prefetch_count=10)
        channel.basic_consume("logged", lambda *args: None, arguments={"x-stream-offset": "first"})
    ok = channels[1].queue_declare("logged", passive=True).method
    assert ok.consumer_count == 0

    def fleet_sum(name: str) -> tuple[float, ...]:
        return tuple(
            sum(
                v
                for (n, labels), v in scrape(port)[1].items()
                if n == name and ("queue", "logged") in labels
            )
            for port in ports
        )

    deadline = time.monotonic() + 60
    while sorted(fleet_sum("rabbitmq_queue_consumers")) != [0, 2]:
        assert time.monotonic() < deadline, fleet_sum("rabbitmq_queue_consumers")
        for connection in connections:
            connection.process_data_events(time_limit=0.5)
    leader = fleet_sum("rabbitmq_queue_consumers").index(2)
    assert fleet_sum("rabbitmq_queue_messages")[leader] == 5
    assert fleet_sum("rabbitmq_queue_messages_ready")[leader] == 5
    for connection in connections:
        connection.close()
