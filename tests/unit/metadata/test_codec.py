"""Znode data: entities survive the JSON round trip with every AMQP type intact."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.fieldtable import Field
from gateway.metadata.codec import (
    TopicKey,
    arguments_digest,
    binding_from_child,
    binding_id,
    decode_binding,
    decode_drain,
    decode_exchange,
    decode_exchange_binding,
    decode_queue,
    encode_binding,
    encode_drain,
    encode_exchange,
    encode_exchange_binding,
    encode_queue,
    exchange_binding_from_child,
    exchange_binding_id,
    topic_key_child,
    topic_key_from_child,
)
from gateway.metadata.paths import encode_name
from gateway.metadata.store import REMOVE, DrainRecord
from gateway.model.entities import Binding, Exchange, ExchangeBinding, ExchangeType, Queue
from gateway.model.graph import RouteSnapshot
from tests.unit.amqp.strategies import tables

names = st.text(max_size=30)


@given(names, st.sampled_from(list(ExchangeType)), st.booleans(), st.booleans(), tables())
def test_exchanges_round_trip(
    name: str, type_: ExchangeType, durable: bool, internal: bool, arguments: dict[str, Field]
) -> None:
    exchange = Exchange(name, type_, durable, not durable, internal, arguments)
    decoded = decode_exchange(encode_name(name), encode_exchange(exchange))
    assert decoded == exchange
    assert list(decoded.arguments) == list(arguments)  # the order is kept too


@given(names, st.booleans(), st.booleans(), st.none() | names, tables())
def test_queues_round_trip(
    name: str, durable: bool, auto_delete: bool, owner: str | None, arguments: dict[str, Field]
) -> None:
    queue = Queue(name, durable, owner is not None, auto_delete, arguments, owner)
    decoded = decode_queue(encode_name(name), encode_queue(queue))
    # Made from a template of the document without the constructor: the same value.
    assert decoded == queue and hash(decoded) == hash(queue) and repr(decoded) == repr(queue)
    again = decode_queue(encode_name(name + "2"), encode_queue(queue))
    assert again.name == name + "2" and decoded.name == name


def test_a_queue_document_the_constructor_refuses_is_refused() -> None:
    with pytest.raises(ValueError, match="owner"):
        decode_queue("q", b'{"v":1,"durable":true,"exclusive":true,"auto_delete":false}')


@given(names, names, names, tables())
def test_bindings_round_trip(queue: str, exchange: str, key: str, args: dict[str, Field]) -> None:
    binding = Binding(queue, exchange, key, args)
    child = binding_id(binding)
    assert decode_binding(child, encode_binding(binding)) == binding
    if args:
        assert binding_from_child(child) is None  # the data must be read
    else:
        found = binding_from_child(child)  # the name says it all
        assert found == binding and hash(found) == hash(binding) and repr(found) == repr(binding)


@given(names, names, names, tables())
def test_exchange_bindings_round_trip(
    source: str, destination: str, key: str, args: dict[str, Field]
) -> None:
    binding = ExchangeBinding(source, destination, key, args)
    child = exchange_binding_id(binding)
    assert decode_exchange_binding(child, encode_exchange_binding(binding)) == binding
    if args:
        assert exchange_binding_from_child(child) is None
    else:
        assert exchange_binding_from_child(child) == binding
    with pytest.raises(ValueError):
        decode_exchange_binding(
            child, encode_exchange_binding(ExchangeBinding("", "", "", {"z": Field("t", True)}))
        )


@given(names, names, names, tables(), tables())
def test_drain_records_keep_the_bindings_they_judge_by(
    queue: str, exchange: str, key: str, args: dict[str, Field], edge_args: dict[str, Field]
) -> None:
    via = RouteSnapshot(
        (Exchange(exchange, ExchangeType.HEADERS), Exchange(key, ExchangeType.TOPIC)),
        (Binding(queue, key, key, args), Binding(queue, exchange, "")),
        (ExchangeBinding(exchange, key, "", edge_args),),
    )
    judged = (((5, 6), via), ((7, 8), RouteSnapshot()))
    for record in (
        DrainRecord((1, 2)),
        DrainRecord((1, 2), (3, 4)),
        DrainRecord((7, 8), (7, 8), judged),
        REMOVE,
    ):
        assert decode_drain(encode_drain(record)) == record
    assert json.loads(encode_drain(DrainRecord((1, 2), via=(((1, 1), RouteSnapshot()),)))) == {
        "v": 1,
        "end": [1, 2],
        "via": [{"until": [1, 1], "exchanges": [], "bindings": [], "exchange_bindings": []}],
    }
    record = DrainRecord((7, 8), (7, 8), judged)
    assert record.judged_by((5, 6)) == via and record.judged_by((1, 1)) == via
    assert record.judged_by((6, 0)) == RouteSnapshot()
    assert record.judged_by((7, 9)) is None and not record.excludes((9, 9))


@pytest.mark.parametrize(
    "via",
    [
        {},
        [[]],
        [{"exchanges": []}],
        [{"until": [1, 1], "exchanges": [["x"]]}],
        [{"until": [1, 1], "bindings": [["q", "x", 1, None]]}],
        [{"until": [1, 1], "exchanges": [["x", "nope"]]}],
    ],
)
def test_malformed_drain_bindings_are_refused(via: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        decode_drain(json.dumps({"v": 1, "end": [1, 2], "via": via}).encode())


def test_documents_are_small_and_readable() -> None:
    queue = Queue("q", durable=True, exclusive=True, owner="conn-7")
    assert json.loads(encode_queue(queue)) == {
        "v": 1,
        "durable": True,
        "exclusive": True,
        "auto_delete": False,
        "owner": "conn-7",
    }
    assert encode_binding(Binding("q", "x", "k")) == b'{"v":1}'
    arguments = {"alternate-exchange": Field("S", "ae")}
    exchange = Exchange("x", ExchangeType.HEADERS, arguments=arguments)
    document = json.loads(encode_exchange(exchange))
    assert document["type"] == "headers"
    assert isinstance(document["arguments"], str)  # base64 of the exact wire table


def test_digest_ignores_key_order_but_not_types() -> None:
    one = {"a": Field("b", 1), "x-match": Field("S", "all")}
    reordered = {"x-match": Field("S", "all"), "a": Field("b", 1)}
    unsigned = {"a": Field("B", 1), "x-match": Field("S", "all")}
    assert arguments_digest(one) == arguments_digest(reordered)
    assert arguments_digest(one) != arguments_digest(unsigned)
    assert arguments_digest({}) is None
    nested = {"t": Field("F", {"a": Field("b", 1), "b": Field("b", 2)})}
    nested_reordered = {"t": Field("F", {"b": Field("b", 2), "a": Field("b", 1)})}
    assert arguments_digest(nested) == arguments_digest(nested_reordered)
    # Arrays are ordered.
    assert arguments_digest({"a": Field("A", [Field("b", 1), Field("b", 2)])}) != (
        arguments_digest({"a": Field("A", [Field("b", 2), Field("b", 1)])})
    )
    # A decimal's scale is part of its value on the wire.
    assert arguments_digest({"d": Field("D", Decimal("1.5"))}) != (
        arguments_digest({"d": Field("D", Decimal("1.50"))})
    )


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"v":2,"type":"direct"}',
        b'{"type":"direct"}',
        b'{"v":1,"type":"nope"}',
        b'{"v":1,"type":"direct","durable":"yes"}',
        b'{"v":1,"type":"direct","arguments":"!!"}',
        b'{"v":1,"type":"direct","arguments":"AAAAAQ=="}',
    ],
)
def test_bad_exchange_documents_are_refused(data: bytes) -> None:
    with pytest.raises((ValueError, KeyError)):
        decode_exchange("x", data)


def test_a_binding_whose_arguments_do_not_match_its_name_is_refused() -> None:
    child = binding_id(Binding("q", "x", "", {"a": Field("b", 1)}))
    other = encode_binding(Binding("q", "x", "", {"a": Field("b", 2)}))
    with pytest.raises(ValueError, match="digest"):
        decode_binding(child, other)


def test_topic_key_children() -> None:
    child = topic_key_child("amq.topic", "a/b")
    assert child == "amq.topic,a%2Fb"
    assert topic_key_from_child(child) == TopicKey("amq.topic", "a/b")
