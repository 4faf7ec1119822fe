"""The exposition built from plain-int counters: names, types, labels and values."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.counters import MESSAGE_SIZE_BUCKETS, Histogram, ProcessCounters
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
