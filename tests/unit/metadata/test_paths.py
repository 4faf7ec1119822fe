"""Znode names: reversible, canonical, legal for ZooKeeper, compact for ordinary names."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.metadata.paths import (
    BUCKETS,
    Folder,
    Layout,
    ParsedBinding,
    ParsedExchangeBinding,
    bucket_for,
    bucket_of,
    decode_binding_id,
    decode_exchange_binding_id,
    decode_name,
    decode_topic_key,
    encode_binding_id,
    encode_exchange_binding_id,
    encode_name,
    encode_topic_key,
)

# What ZooKeeper refuses in a path element (PathUtils.validatePath), besides "/".
_ILLEGAL = re.compile("[\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]")

# Any str a name can be, lone surrogates included (a shortstr decoded with surrogateescape).
names = st.text(st.characters(), max_size=40)


def assert_legal(element: str) -> None:
    assert element and element not in (".", "..")
    assert "/" not in element
    assert not _ILLEGAL.search(element)
    assert element.isascii()


@given(names)
def test_names_round_trip_and_are_legal(name: str) -> None:
    encoded = encode_name(name)
    assert decode_name(encoded) == name
    assert_legal(encoded)
    assert "," not in encoded


@given(names, names)
def test_distinct_names_stay_distinct(first: str, second: str) -> None:
    if first != second:
        assert encode_name(first) != encode_name(second)


@pytest.mark.parametrize(
    ("name", "encoded"),
    [
        ("orders", "orders"),
        ("amq.gen-JzTY20BRgKO-HjmUJj0wLg", "amq.gen-JzTY20BRgKO-HjmUJj0wLg"),
        ("celery@host.celery.pidbox", "celery@host.celery.pidbox"),
        ("a.*.#", "a.*.#"),
        ("", "%"),
        (".", "%2E"),
        ("..", "%2E."),
        ("...", "..."),
        ("a/b", "a%2Fb"),
        ("50%", "50%25"),
        ("a,b", "a%2Cb"),
        ("a b", "a%20b"),
        ("é", "%C3%A9"),
        ("\udc80", "%ED%B2%80"),
    ],
)
def test_examples(name: str, encoded: str) -> None:
    assert encode_name(name) == encoded
    assert decode_name(encoded) == name


@pytest.mark.parametrize(
    "text",
    ["", "%", "%2e", "%41", "a%2", "a%zz", "a/b", "a,b", "%2E%2E", ".", "..", "é", "%FF", "a b"],
)
def test_only_canonical_encodings_decode(text: str) -> None:
    if text == "%":
        assert decode_name(text) == ""
        return
    with pytest.raises(ValueError):
        decode_name(text)


def test_buckets_are_stable_and_spread() -> None:
    # Part of the on-disk format (the low byte of a CRC-32): these must never change.
    golden = {"orders": "ee", "%": "ca", "a%2Fb": "e5", "q,amq.direct,k": "aa", "amq.topic": "fc"}
    assert {child: bucket_of(child) for child in golden} == golden
    used = {bucket_of(f"queue-{index}") for index in range(10_000)}
    assert len(used) == BUCKETS
    assert all(re.fullmatch("[0-9a-f]{2}", bucket) for bucket in used)


@given(names, names, names, st.none() | st.just("AAAAAAAAAAAAAAAAAAAAAA"))
def test_binding_ids_round_trip(queue: str, exchange: str, key: str, digest: str | None) -> None:
    child = encode_binding_id(queue, exchange, key, digest)
    assert_legal(child)
    assert decode_binding_id(child) == ParsedBinding(queue, exchange, key, digest)


@pytest.mark.parametrize("child", ["q,x", "q,x,k,", "q,x,k,d,e", "q,x,%zz", "q"])
def test_malformed_binding_ids(child: str) -> None:
    with pytest.raises(ValueError):
        decode_binding_id(child)


@given(names, names, names, st.none() | st.just("AAAAAAAAAAAAAAAAAAAAAA"))
def test_exchange_binding_ids_round_trip_and_never_read_as_queue_bindings(
    source: str, destination: str, key: str, digest: str | None
) -> None:
    child = encode_exchange_binding_id(source, destination, key, digest)
    assert_legal(child)
    assert child.startswith(",")
    assert decode_exchange_binding_id(child) == ParsedExchangeBinding(
        source, destination, key, digest
    )
    with pytest.raises(ValueError):
        decode_binding_id(child)  # a ref under an exchange node is one kind or the other
    with pytest.raises(ValueError):
        decode_exchange_binding_id(encode_binding_id(source, destination, key, digest))


@pytest.mark.parametrize("child", [",s,d", ",s,d,k,", "s,d,k", ",s,d,k,g,h", ",s,%zz,k"])
def test_malformed_exchange_binding_ids(child: str) -> None:
    with pytest.raises(ValueError):
        decode_exchange_binding_id(child)


@given(names, names)
def test_topic_keys_round_trip(exchange: str, key: str) -> None:
    child = encode_topic_key(exchange, key)
    assert_legal(child)
    assert decode_topic_key(child) == (exchange, key)


def test_layout() -> None:
    layout = Layout("/starlight-rabbitmq")
    assert layout.namespace("public/default") == "/starlight-rabbitmq/vhosts/public%2Fdefault"
    assert layout.folder("t/n", Folder.TOPIC_KEYS) == "/starlight-rabbitmq/vhosts/t%2Fn/topic-keys"
    assert layout.node("t/n", Folder.QUEUES, "q") == (
        f"/starlight-rabbitmq/vhosts/t%2Fn/queues/{bucket_of('q')}/q"
    )
    assert Layout("/a/b").skeleton("t/n") == [
        "/a",
        "/a/b",
        "/a/b/vhosts",
        "/a/b/vhosts/t%2Fn",
        "/a/b/vhosts/t%2Fn/exchanges",
        "/a/b/vhosts/t%2Fn/queues",
        "/a/b/vhosts/t%2Fn/bindings",
        "/a/b/vhosts/t%2Fn/exchange-bindings",
        "/a/b/vhosts/t%2Fn/topic-keys",
        "/a/b/vhosts/t%2Fn/owners",
        "/a/b/vhosts/t%2Fn/consumers",
        "/a/b/vhosts/t%2Fn/drains",
        "/a/b/vhosts/t%2Fn/leader",
        "/a/b/vhosts/t%2Fn/deliveries",
    ]
    assert layout.deliveries("t/n") == "/starlight-rabbitmq/vhosts/t%2Fn/deliveries"
    # Records about a queue share the queue's bucket, whatever follows its name.
    for folder in (Folder.OWNERS, Folder.CONSUMERS, Folder.DRAINS):
        assert layout.node("t/n", folder, "q,anything") == (
            f"/starlight-rabbitmq/vhosts/t%2Fn/{folder.value}/{bucket_of('q')}/q,anything"
        )
    assert bucket_for(Folder.BINDINGS, "q,x,k") == bucket_of("q,x,k")
    for prefix in ("", "relative", "/trailing/", "/a//b"):
        with pytest.raises(ValueError):
            Layout(prefix)
