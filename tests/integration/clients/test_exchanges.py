"""Exchanges as RabbitMQ has them, through pika, on both backends.

Routing of every exchange type (direct, fanout, topic, headers with each x-match mode), the
default exchange and the predeclared ``amq.*`` exchanges, and the declare/delete rules with
RabbitMQ's reply codes and texts (rabbit_channel, rabbit_exchange, rabbit_misc).
"""

from __future__ import annotations

from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import Running
from tests.support.clients import (
    channel_closed,
    collect,
    drain,
    get_bodies,
    round_trip,
    unique,
)


def bound_queue(channel: BlockingChannel, exchange: str, key: str = "", **arguments: Any) -> str:
    queue = unique("q")
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange, key, arguments=arguments or None)
    return queue


def headers(**values: Any) -> pika.BasicProperties:
    return pika.BasicProperties(headers=values)


# ------------------------------------------------------------------------------------ routing


def test_direct_exchange_routes_on_the_exact_key(connection: pika.BlockingConnection) -> None:
    channel = connection.channel()
    exchange = unique("direct")
    channel.exchange_declare(exchange, "direct")
    first = bound_queue(channel, exchange, "k1")
    second = bound_queue(channel, exchange, "k2")
    both = bound_queue(channel, exchange, "k1")
    channel.queue_bind(both, exchange, "k2")
    for key in ("k1", "k2", "k3", "K1", "k1.x"):
        channel.basic_publish(exchange, key, key.encode())
    got = collect(connection, {first: 1, second: 1, both: 2})
    assert got[first] == [b"k1"]
    assert got[second] == [b"k2"]
    # Two keys are two Pulsar topics: their order relative to each other is not promised.
    assert sorted(got[both]) == [b"k1", b"k2"]


def test_fanout_exchange_ignores_the_key(connection: pika.BlockingConnection) -> None:
    channel = connection.channel()
    exchange = unique("fanout")
    channel.exchange_declare(exchange, "fanout")
    queues = [bound_queue(channel, exchange, key) for key in ("", "a", "whatever")]
    for n, key in enumerate(("", "a", "zzz")):
        channel.basic_publish(exchange, key, f"m{n}".encode())
    got = collect(connection, dict.fromkeys(queues, 3))
    for queue in queues:
        # One topic per fanout exchange: publish order holds.
        assert got[queue] == [b"m0", b"m1", b"m2"]


# Binding key → the routing keys (of those published) it must receive.
TOPIC_CASES = {
    "*.error": {"db.error", "web.error", ".error"},
    "#": {"db.error", "web.error", "db.info", "a.b.c.d", "", "x", ".error", "a..d"},
    "a.#.d": {"a.b.c.d", "a..d"},
    "#.error": {"db.error", "web.error", ".error"},
    "db.*": {"db.error", "db.info"},
    "x": {"x"},
    "a.*.d": {"a..d"},
    "*": {"x"},  # one word exactly: the empty key is zero words
}
TOPIC_KEYS = ("db.error", "web.error", "db.info", "a.b.c.d", "", "x", ".error", "a..d")


def test_topic_exchange_wildcards(connection: pika.BlockingConnection) -> None:
    channel = connection.channel()
    exchange = unique("topic")
    channel.exchange_declare(exchange, "topic")
    queues = {pattern: bound_queue(channel, exchange, pattern) for pattern in TOPIC_CASES}
    for key in TOPIC_KEYS:
        channel.basic_publish(exchange, key, key.encode() or b"<empty>")
    got = collect(connection, {queues[p]: len(keys) for p, keys in TOPIC_CASES.items()})
    for pattern, expected in TOPIC_CASES.items():
        wanted = sorted(key.encode() or b"<empty>" for key in expected)
        assert sorted(got[queues[pattern]]) == wanted, pattern


# Binding arguments → the messages (by name) the queue must receive.
HEADER_BINDINGS: dict[str, tuple[dict[str, Any], set[str]]] = {
    "all": ({"x-match": "all", "format": "pdf", "type": "report"}, {"m1"}),
    "any": ({"x-match": "any", "format": "pdf", "type": "log"}, {"m1", "m2"}),
    "all-with-x": ({"x-match": "all-with-x", "x-tenant": "acme", "format": "pdf"}, {"m2"}),
    "any-with-x": ({"x-match": "any-with-x", "x-tenant": "acme", "type": "log"}, {"m2", "m3"}),
    "absent means all": ({"format": "zip"}, {"m4"}),
    # In all/any mode x- arguments are ignored: with nothing left, all matches everything.
    "all ignores x-": ({"x-match": "all", "x-tenant": "acme"}, {"m1", "m2", "m3", "m4", "m5"}),
    "any ignores x-": ({"x-match": "any", "x-tenant": "acme"}, set()),
    "void is presence": ({"x-match": "all", "type": None}, {"m1", "m2"}),
    "numbers compare": ({"x-match": "all", "n": 1}, {"m4"}),
}
HEADER_MESSAGES: dict[str, dict[str, Any] | None] = {
    "m1": {"format": "pdf", "type": "report"},
    "m2": {"format": "pdf", "type": "log", "x-tenant": "acme"},
    "m3": {"x-tenant": "acme"},
    "m4": {"format": "zip", "n": 1},
    "m5": None,
}


@pytest.mark.parametrize("exchange_type", ["declared", "amq.headers", "amq.match"])
def test_headers_exchange_x_match_modes(
    connection: pika.BlockingConnection, exchange_type: str
) -> None:
    channel = connection.channel()
    exchange = exchange_type
    if exchange_type == "declared":
        exchange = unique("headers")
        channel.exchange_declare(exchange, "headers")
    queues = {
        name: bound_queue(channel, exchange, "ignored", **arguments)
        for name, (arguments, _) in HEADER_BINDINGS.items()
    }
    for name, values in HEADER_MESSAGES.items():
        channel.basic_publish(
            exchange, "any-key", name.encode(), pika.BasicProperties(headers=values)
        )
    got = collect(connection, {queues[n]: len(e) for n, (_, e) in HEADER_BINDINGS.items()})
    for name, (_, expected) in HEADER_BINDINGS.items():
        # One topic per headers exchange, filtered on delivery: publish order holds.
        assert got[queues[name]] == [m.encode() for m in HEADER_MESSAGES if m in expected], name
    for queue in queues.values():
        channel.queue_delete(queue)  # amq.headers and amq.match are shared by the module


def test_invalid_x_match_is_406(channel: BlockingChannel) -> None:
    exchange = unique("headers")
    channel.exchange_declare(exchange, "headers")
    queue = unique("q")
    channel.queue_declare(queue)
    with channel_closed(
        406,
        'PRECONDITION_FAILED - Invalid x-match field value <<"most">>; '
        "expected all, any, all-with-x, or any-with-x",
    ):
        channel.queue_bind(queue, exchange, arguments={"x-match": "most"})


def test_default_exchange_routes_to_the_queue_named_by_the_key(
    channel: BlockingChannel,
) -> None:
    queue = unique("q")
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"direct to queue")
    channel.basic_publish("", unique("nobody"), b"lost")
    assert get_bodies(channel, queue, 1) == [b"direct to queue"]
    assert drain(channel, queue) == []


def test_default_exchange_cannot_be_declared_deleted_or_bound(running: Running) -> None:
    connection = running.connect()
    queue = unique("q")
    connection.channel().queue_declare(queue)
    text = "ACCESS_REFUSED - operation not permitted on the default exchange"
    for action in (
        lambda ch: ch.exchange_declare("", "direct"),
        lambda ch: ch.exchange_declare("", "direct", passive=True),
        lambda ch: ch.exchange_delete(""),
        lambda ch: ch.queue_bind(queue, "", queue),
        lambda ch: ch.queue_unbind(queue, "", queue),
    ):
        channel = connection.channel()
        with channel_closed(403, text):
            action(channel)
    connection.close()


@pytest.mark.parametrize(
    ("exchange", "key", "bind_arguments", "properties"),
    [
        ("amq.direct", "k", None, None),
        ("amq.fanout", "", None, None),
        ("amq.topic", "orders.#", None, None),
        ("amq.headers", "", {"x-match": "any", "kind": "a"}, {"kind": "a"}),
        ("amq.match", "", {"x-match": "all", "kind": "b"}, {"kind": "b"}),
    ],
)
def test_predeclared_exchanges_route(
    channel: BlockingChannel,
    exchange: str,
    key: str,
    bind_arguments: dict[str, Any] | None,
    properties: dict[str, Any] | None,
) -> None:
    queue = unique("q")
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange, key, arguments=bind_arguments)
    publish_key = "orders.created.eu" if exchange == "amq.topic" else key
    body = unique("m").encode()
    channel.basic_publish(exchange, publish_key, body, pika.BasicProperties(headers=properties))
    assert collect(channel.connection, {queue: 1})[queue] == [body]
    channel.queue_unbind(queue, exchange, key, arguments=bind_arguments)
    channel.queue_delete(queue)


def test_predeclared_exchanges_exist_and_redeclare_equivalently(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    for name, kind in (
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
        ("amq.match", "headers"),
    ):
        channel.exchange_declare(name, passive=True)
        channel.exchange_declare(name, kind, durable=True)  # clients do this for amq.topic
    with channel_closed(
        406,
        "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'amq.direct' in vhost '/': "
        "received 'fanout' but current is 'direct'",
    ):
        channel.exchange_declare("amq.direct", "fanout", durable=True)
    channel = connection.channel()
    with channel_closed(
        406,
        "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'amq.topic' in vhost '/': "
        "received 'false' but current is 'true'",
    ):
        channel.exchange_declare("amq.topic", "topic", durable=False)
    connection.close()


# ------------------------------------------------------------------------------ declare rules


def test_passive_declare_of_a_missing_exchange_is_404(channel: BlockingChannel) -> None:
    name = unique("missing")
    with channel_closed(404, f"NOT_FOUND - no exchange '{name}' in vhost '/'"):
        channel.exchange_declare(name, passive=True)


def test_passive_declare_of_an_existing_exchange_ignores_its_flags(
    channel: BlockingChannel,
) -> None:
    name = unique("x")
    channel.exchange_declare(name, "topic", durable=True)
    # A passive declare checks existence only: type and flags are not compared.
    channel.exchange_declare(name, "fanout", passive=True, durable=False, auto_delete=True)


def test_reserved_prefix_is_403(channel: BlockingChannel) -> None:
    name = unique("amq.mine")
    with channel_closed(
        403, f"ACCESS_REFUSED - exchange name '{name}' contains reserved prefix 'amq.*'"
    ):
        channel.exchange_declare(name, "direct")


def test_unknown_exchange_type_is_406(channel: BlockingChannel) -> None:
    name = unique("x")
    with channel_closed(406, "PRECONDITION_FAILED - unknown exchange type 'x-foo'"):
        channel.exchange_declare(name, "x-foo")


def _inequivalent(name: str, arg: str, received: str, current: str) -> str:
    return (
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for exchange '{name}' in vhost '/': "
        f"received {received} but current is {current}"
    )


@pytest.mark.parametrize(
    ("changed", "arg", "received", "current"),
    [
        ({"exchange_type": "fanout"}, "type", "'fanout'", "'direct'"),
        ({"durable": False}, "durable", "'false'", "'true'"),
        ({"auto_delete": True}, "auto_delete", "'true'", "'false'"),
        ({"internal": True}, "internal", "'true'", "'false'"),
        (
            {"arguments": {"alternate-exchange": "other"}},
            "alternate-exchange",
            "the value 'other' of type 'longstr'",
            "none",
        ),
    ],
)
def test_inequivalent_redeclare_is_406(
    channel: BlockingChannel, changed: dict[str, Any], arg: str, received: str, current: str
) -> None:
    name = unique("x")
    original: dict[str, Any] = {"exchange_type": "direct", "durable": True}
    channel.exchange_declare(name, **original)
    channel.exchange_declare(name, **original)  # the same declaration again is a no-op
    with channel_closed(406, _inequivalent(name, arg, received, current)):
        channel.exchange_declare(name, **{**original, **changed})


def test_other_arguments_may_differ_on_redeclare(channel: BlockingChannel) -> None:
    name = unique("x")
    channel.exchange_declare(name, "direct", arguments={"x-custom": 1})
    # Only alternate-exchange is compared (rabbit_exchange:assert_args_equivalence).
    channel.exchange_declare(name, "direct", arguments={"x-custom": 2, "x-other": "y"})
    channel.exchange_declare(name, "direct")


def test_declared_flags_are_kept(running: Running) -> None:
    """durable, auto_delete and internal are stored: redeclaring with all three matches."""
    connection = running.connect()
    channel = connection.channel()
    name = unique("x")
    channel.exchange_declare(name, "headers", durable=True, auto_delete=True, internal=True)
    other = running.connect().channel()  # another connection sees the same entity
    other.exchange_declare(name, "headers", durable=True, auto_delete=True, internal=True)
    other.connection.close()
    channel.exchange_delete(name)
    connection.close()


# ------------------------------------------------------------------------------------ delete


def test_delete_if_unused_refuses_a_bound_exchange(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = unique("x")
    channel.exchange_declare(name, "fanout")
    queue = bound_queue(channel, name)
    with channel_closed(406, f"PRECONDITION_FAILED - exchange '{name}' in vhost '/' in use"):
        channel.exchange_delete(name, if_unused=True)
    channel = connection.channel()
    channel.queue_unbind(queue, name, "")
    channel.exchange_delete(name, if_unused=True)
    with channel_closed(404, f"NOT_FOUND - no exchange '{name}' in vhost '/'"):
        channel.exchange_declare(name, passive=True)
    connection.close()


def test_delete_is_idempotent_and_removes_routing(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = unique("x")
    channel.exchange_declare(name, "direct")
    queue = bound_queue(channel, name, "k")
    channel.exchange_delete(name)
    channel.exchange_delete(name)  # no such exchange any more: still Delete-Ok
    channel.exchange_delete(unique("never-existed"))
    # Re-created, it has no bindings: the old one's binding went with it.
    channel.exchange_declare(name, "direct")
    channel.basic_publish(name, "k", b"after re-create")
    round_trip(channel)
    assert drain(channel, queue) == []
    channel.exchange_delete(name)
    with channel_closed(404, f"NOT_FOUND - no exchange '{name}' in vhost '/'"):
        channel.basic_publish(name, "k", b"to a deleted exchange")
        round_trip(channel)
    connection.close()


def test_system_exchanges_cannot_be_deleted(running: Running) -> None:
    connection = running.connect()
    for name in ("amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"):
        channel = connection.channel()
        with channel_closed(
            403, f"ACCESS_REFUSED - deletion of system exchange '{name}' in vhost '/' not allowed"
        ):
            channel.exchange_delete(name)
    connection.close()


# ------------------------------------------------------------------------- internal, auto-delete


def test_publishing_to_an_internal_exchange_is_403(channel: BlockingChannel) -> None:
    name = unique("internal")
    channel.exchange_declare(name, "fanout", internal=True)
    bound_queue(channel, name)  # queues may still be bound to it
    with channel_closed(
        403, f"ACCESS_REFUSED - cannot publish to internal exchange '{name}' in vhost '/'"
    ):
        channel.basic_publish(name, "", b"refused")
        round_trip(channel)


def test_auto_delete_exchange_goes_with_its_last_binding(channel: BlockingChannel) -> None:
    name = unique("auto")
    channel.exchange_declare(name, "direct", auto_delete=True)
    # Never bound: it stays (RabbitMQ deletes it only when a binding is removed).
    channel.exchange_declare(name, passive=True)
    first = bound_queue(channel, name, "a")
    second = bound_queue(channel, name, "b")
    channel.queue_unbind(first, name, "a")
    channel.exchange_declare(name, passive=True)  # one binding left
    channel.queue_unbind(second, name, "b")
    with channel_closed(404, f"NOT_FOUND - no exchange '{name}' in vhost '/'"):
        channel.exchange_declare(name, passive=True)


def test_auto_delete_exchange_goes_when_its_last_queue_is_deleted(
    channel: BlockingChannel,
) -> None:
    """Deleting a queue removes its bindings, and an auto-delete exchange left without any
    is deleted (rabbit_binding:remove_for_destination → maybe_auto_delete)."""
    name = unique("auto")
    channel.exchange_declare(name, "fanout", auto_delete=True)
    queue = bound_queue(channel, name)
    channel.queue_delete(queue)
    with channel_closed(404, f"NOT_FOUND - no exchange '{name}' in vhost '/'"):
        channel.exchange_declare(name, passive=True)
