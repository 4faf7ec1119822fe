"""Names with characters Pulsar topic names cannot hold, end to end through pika.

Exchange names, routing keys and queue names are AMQP shortstrs: any UTF-8. The gateway
encodes them reversibly into Pulsar topic names (docs/mapping.md, "Topic names"); a client
must see its names come back unchanged in Basic.Deliver.
"""

from __future__ import annotations

import httpx
import pika
import pytest

from tests.integration.clients.conftest import PULSAR_ONLY, Running
from tests.support.clients import unique, wait_for

ODD_KEYS = (
    "with space",
    "a/b/c",
    "100%",
    "%2F",
    "café €",
    "日本語.キー",
    "a__b",
    "__",
    "_",
    "ends_",
    "=3D",
    "x-partition-3",
    "t.transaction_pending_ack",
    "",
    "tab\tand quote'\"",
)
ODD_EXCHANGES = ("my exchange/%", "a__b", "ex_", "café", "x-partition-1", "amq=2Edefault")


def consume_deliveries(
    connection: pika.BlockingConnection, queues: list[str], count: int
) -> list[tuple[str, str, str, bytes]]:
    """(queue, exchange, routing key, body) of ``count`` deliveries from ``queues``."""
    channel = connection.channel()
    got: list[tuple[str, str, str, bytes]] = []
    for queue in queues:
        channel.basic_consume(
            queue,
            lambda _ch, method, _p, body, queue=queue: got.append(
                (queue, method.exchange, method.routing_key, body)
            ),
            auto_ack=True,
        )
    wait_for(lambda: len(got) >= count, connection, what=f"{count} deliveries")
    channel.close()
    return got


def test_direct_exchange_with_odd_keys(connection: pika.BlockingConnection) -> None:
    channel = connection.channel()
    exchange = unique("my exchange/%")
    channel.exchange_declare(exchange, "direct")
    every_key, only_one = unique("q"), unique("q")
    channel.queue_declare(every_key)
    channel.queue_declare(only_one)
    for key in ODD_KEYS:
        channel.queue_bind(every_key, exchange, key)
    # Keys whose encodings share pieces must not be confused: "a__b" is neither "a" nor "__".
    channel.queue_bind(only_one, exchange, "a__b")
    for key in (*ODD_KEYS, "a", "b", "a_", "_b", "a_b"):
        channel.basic_publish(exchange, key, f"for {key}".encode())
    got = consume_deliveries(connection, [every_key, only_one], len(ODD_KEYS) + 1)
    assert sorted(got) == sorted(
        [(every_key, exchange, key, f"for {key}".encode()) for key in ODD_KEYS]
        + [(only_one, exchange, "a__b", b"for a__b")]
    )


def test_odd_exchange_names(connection: pika.BlockingConnection) -> None:
    channel = connection.channel()
    queue = unique("q")
    channel.queue_declare(queue)
    exchanges = [f"{name}{unique('')}" for name in ODD_EXCHANGES]
    for kind, exchange in zip(("direct", "fanout", "topic") * 2, exchanges, strict=True):
        channel.exchange_declare(exchange, kind)
        channel.queue_bind(queue, exchange, "k/ü")
        channel.basic_publish(exchange, "k/ü", exchange.encode())
    got = consume_deliveries(connection, [queue], len(exchanges))
    assert sorted(got) == sorted((queue, e, "k/ü", e.encode()) for e in exchanges)


def test_topic_exchange_with_odd_keys(connection: pika.BlockingConnection) -> None:
    channel = connection.channel()
    exchange = unique("topic/with %")
    channel.exchange_declare(exchange, "topic")
    everything, cafe = unique("q"), unique("q")
    channel.queue_declare(everything)
    channel.queue_declare(cafe)
    channel.queue_bind(everything, exchange, "#")
    channel.queue_bind(cafe, exchange, "café €.*")
    keys = [*ODD_KEYS, "café €.x/y", "café €.__"]
    for key in keys:
        channel.basic_publish(exchange, key, key.encode())
    got = consume_deliveries(connection, [everything, cafe], len(keys) + 2)
    assert sorted((q, k) for q, _, k, _ in got if q == everything) == sorted(
        (everything, key) for key in keys
    )
    assert sorted(k for q, _, k, _ in got if q == cafe) == ["café €.__", "café €.x/y"]


def test_queues_with_odd_names_on_the_default_exchange(
    connection: pika.BlockingConnection,
) -> None:
    channel = connection.channel()
    names = [f"{name} {unique('')}" for name in ("q with space/ü%", "q__x", "_", "pulsar.dedup")]
    for name in names:
        assert channel.queue_declare(name).method.queue == name
        channel.basic_publish("", name, name.encode())
    got = consume_deliveries(connection, names, len(names))
    assert sorted(got) == sorted((name, "", name, name.encode()) for name in names)
    for name in names:
        channel.queue_delete(name)


@pytest.mark.parametrize("running", [PULSAR_ONLY], indirect=True)
def test_pulsar_topic_names_follow_the_mapping(running: Running) -> None:
    """The documented examples: ``my exchange`` + ``a/b`` → ``my=20exchange__a=2Fb``, the
    default exchange + queue ``café`` → ``amq.default__caf=C3=A9``."""
    connection = running.connect()
    channel = connection.channel()
    suffix = unique("")  # "-<hex>": kept as it is by the encoding
    exchange, queue = f"my exchange{suffix}", f"café{suffix}"
    channel.exchange_declare(exchange, "direct")
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange, "a/b")
    channel.confirm_delivery()
    channel.basic_publish(exchange, "a/b", b"x")
    channel.basic_publish("", queue, b"y")
    connection.close()
    assert running.namespace is not None
    tenant, namespace = running.namespace.tenant, running.namespace.namespace
    prefix = f"persistent://{tenant}/{namespace}/"
    with httpx.Client(base_url=running.web_url, timeout=10) as admin:
        topics = admin.get(f"/admin/v2/persistent/{tenant}/{namespace}").json()
    assert f"{prefix}my=20exchange{suffix}__a=2Fb" in topics
    assert f"{prefix}amq.default__caf=C3=A9{suffix}" in topics
