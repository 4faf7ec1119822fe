"""The exposition built from plain-int counters: names, types, labels and values."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.model.vhost import Namespace, VhostMapper
from gateway.observability.counters import (
    MESSAGE_SIZE_BUCKETS,
    Histogram,
    ProcessCounters,
    QueueGauge,
)
from gateway.observability.fleet import SummedExposition
from gateway.observability.metrics import (
    GatewayCollector,
    Identity,
    exposition,
    identity_families,
)


def samples(text: bytes | str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = text.decode() if isinstance(text, bytes) else text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def types(text: bytes) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(text.decode())}


def busy() -> ProcessCounters:
    counters = ProcessCounters()
    a, b = counters.vhost("/"), counters.vhost("billing")
    a.received, b.received = 7, 5
    a.routed, b.routed = 6, 5
    a.delivered_consume_manual_ack, b.delivered_get_auto_ack = 4, 2
    a.acknowledged = 3
    a.consumers, b.consumers = 2, 1
    a.publishers = 1
    counters.connections_opened, counters.connections_closed = 10, 4
    counters.protocol_error(404)
    counters.protocol_error(404)
    counters.auth_failed("PLAIN")
    counters.auth_attempts = 3
    for size in (1, 100, 101, 2_000_000):
        counters.message_sizes.observe(size)
    return counters


IDENTITY = Identity(node="rabbit@gw-1", cluster="prod")


def test_rabbitmq_names_types_and_sums_over_vhosts() -> None:
    text = exposition(GatewayCollector(IDENTITY, busy()))
    got = samples(text)
    amqp = frozenset({("protocol", "amqp091")})
    classic = amqp | {("queue_type", "rabbit_classic_queue")}
    assert got[("rabbitmq_global_messages_received_total", amqp)] == 12
    assert got[("rabbitmq_global_messages_routed_total", amqp)] == 11
    assert got[("rabbitmq_global_messages_delivered_consume_manual_ack_total", classic)] == 4
    assert got[("rabbitmq_global_messages_delivered_get_auto_ack_total", classic)] == 2
    assert got[("rabbitmq_global_messages_delivered_total", classic)] == 6
    assert got[("rabbitmq_global_messages_acknowledged_total", classic)] == 3
    assert got[("rabbitmq_global_consumers", amqp)] == 3
    assert got[("rabbitmq_global_publishers", amqp)] == 1
    assert got[("rabbitmq_connections", frozenset())] == 6
    assert got[("rabbitmq_connections_opened_total", frozenset())] == 10
    assert got[("rabbitmq_auth_attempts_failed_total", frozenset())] == 1
    assert got[("rabbitmq_auth_attempts_succeeded_total", frozenset())] == 2
    assert got[("starlight_protocol_errors_total", frozenset({("reply_code", "404")}))] == 2
    assert got[("starlight_vhost_messages_published_total", frozenset({("vhost", "billing")}))] == 5
    identity = frozenset(
        {
            ("rabbitmq_node", "rabbit@gw-1"),
            ("rabbitmq_cluster", "prod"),
            ("rabbitmq_endpoint", "aggregated"),
        }
    )
    assert got[("rabbitmq_identity_info", identity)] == 1
    kinds = types(text)
    assert kinds["rabbitmq_global_messages_received"] == "counter"
    assert kinds["rabbitmq_connections"] == "gauge"
    assert kinds["rabbitmq_message_size_bytes"] == "histogram"


def test_message_size_buckets_are_rabbitmqs_with_le_inclusive() -> None:
    got = samples(exposition(GatewayCollector(IDENTITY, busy())))

    def bucket(le: str) -> float:
        return got[
            ("rabbitmq_message_size_bytes_bucket", frozenset({("le", le), ("protocol", "amqp091")}))
        ]

    # The Overview dashboard's le values, exactly as it writes them.
    assert [bucket(le) for le in ("100.0", "1000.0", "1e+06", "1e+07", "+Inf")] == [2, 3, 3, 4, 4]
    assert len(MESSAGE_SIZE_BUCKETS) == 8


def test_histogram_bounds() -> None:
    histogram = Histogram((1.0, 2.0))
    for value in (0.5, 1.0, 1.5, 3.0):
        histogram.observe(value)
    assert histogram.cumulative() == [("1.0", 2), ("2.0", 3), ("+Inf", 4)]
    assert histogram.count == 4 and histogram.sum == 6.0


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus)")
def test_promtool_accepts_the_exposition() -> None:
    text = exposition(GatewayCollector(IDENTITY, busy()))
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_workers_expositions_sum_series_by_series() -> None:
    first, second = busy(), busy()
    second.vhost("/").received = 100
    second.vhost("other").received = 1
    texts = [
        exposition(GatewayCollector(Identity(f"rabbit@h-w{i}", "prod"), counters)).decode()
        for i, counters in enumerate((first, second))
    ]
    summed = exposition(SummedExposition(texts, identity_families(IDENTITY)))
    got = samples(summed)
    amqp = frozenset({("protocol", "amqp091")})
    assert got[("rabbitmq_global_messages_received_total", amqp)] == 12 + 106
    assert got[("rabbitmq_connections_opened_total", frozenset())] == 20
    assert got[("starlight_vhost_messages_published_total", frozenset({("vhost", "other")}))] == 1
    assert got[("rabbitmq_message_size_bytes_count", amqp)] == 8
    nodes = [dict(k[1])["rabbitmq_node"] for k in got if k[0] == "rabbitmq_identity_info"]
    assert nodes == ["rabbit@gw-1"]  # the supervisor's identity, once
    uptimes = [v for k, v in got.items() if k[0] == "rabbitmq_erlang_uptime_seconds"]
    assert len(uptimes) == 1  # the largest, not a sum


def labelled_by(mapper: VhostMapper) -> ProcessCounters:
    """Counters labelled as a replica labels them (server/monitoring.py)."""
    counters = ProcessCounters()
    counters.vhost_label = mapper.canonical
    counters.namespace_label = lambda namespace: mapper.vhost_name(Namespace.parse(namespace))
    return counters


def test_a_leader_labels_queues_of_a_vhost_it_never_served_with_the_vhost_name() -> None:
    """The leader's queue gauges of namespaces no client of this replica opened: the label is
    the vhost's name (what every replica's starlight_vhost_* use), not "public/default", so a
    dashboard's {vhost="/"} filter finds them."""
    counters = labelled_by(VhostMapper())
    counters.queues["public/default"] = {"q": QueueGauge(ready=2, messages=3, consumers=1)}
    counters.queues["public/orders"] = {"o": QueueGauge(ready=0, messages=1, consumers=0)}
    counters.queues["acme/billing"] = {"b": QueueGauge(ready=5, messages=5, consumers=0)}
    counters.leading.update({"public/default", "public/orders"})
    held = {("public/orders", "o"): 1, ("acme/billing", "x"): 4}
    got = samples(exposition(GatewayCollector(IDENTITY, counters, held=lambda: held)))
    assert counters.vhosts == {}  # no client ever opened a vhost here

    def gauge(name: str, vhost: str, queue: str) -> float:
        return got[(name, frozenset({("vhost", vhost), ("queue", queue)}))]

    assert gauge("rabbitmq_queue_messages", "/", "q") == 3
    assert gauge("rabbitmq_queue_messages_ready", "/", "q") == 2
    assert gauge("rabbitmq_queue_consumers", "/", "q") == 1
    assert gauge("rabbitmq_queue_messages", "orders", "o") == 1
    assert gauge("rabbitmq_queue_messages_unacked", "orders", "o") == 1
    assert gauge("rabbitmq_queue_messages", "acme/billing", "b") == 5
    assert gauge("rabbitmq_queue_messages_unacked", "acme/billing", "x") == 4
    assert not [labels for (_, labels) in got if ("vhost", "public/default") in labels]
    leader = frozenset({("pulsar_namespace", "public/orders"), ("vhost", "orders")})
    assert got[("starlight_leader", leader)] == 1


def test_aliases_of_one_vhost_count_under_its_one_name() -> None:
    """`/orders`, `orders` and `public/orders` are one namespace: one series, named as the
    leader names the vhost's queues; with short vhosts as tenants, `acme` is acme/default."""
    counters = labelled_by(VhostMapper())
    for alias in ("/orders", "orders", "public/orders"):
        counters.vhost(alias).received += 1
    counters.vhost("").received += 1  # the empty vhost is "/" (model/vhost.py)
    assert set(counters.vhosts) == {"orders", "/"}
    got = samples(exposition(GatewayCollector(IDENTITY, counters)))
    published = "starlight_vhost_messages_published_total"
    assert got[(published, frozenset({("vhost", "orders")}))] == 3
    tenants = labelled_by(VhostMapper(map_short_vhost_to_tenant=True))
    tenants.vhost("/acme/default").received += 1
    tenants.queues["acme/default"] = {"q": QueueGauge(ready=0, messages=0, consumers=0)}
    got = samples(exposition(GatewayCollector(IDENTITY, tenants)))
    assert got[(published, frozenset({("vhost", "acme")}))] == 1
    assert ("rabbitmq_queue_messages", frozenset({("vhost", "acme"), ("queue", "q")})) in got
