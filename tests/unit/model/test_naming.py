"""Topic and subscription names: readable, legal for Pulsar, exactly reversible."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gateway.model.naming import (
    DEFAULT_EXCHANGE_TOPIC,
    decode_local_name,
    encode_local_name,
    keys_for_exchange,
    parse_subscription,
    parse_topic,
    server_named_queue,
    subscription_for,
    topic_for,
)
from gateway.model.vhost import Namespace
from tests.unit.model.pulsar_rules import local_topic_problem, subscription_problem
from tests.unit.model.strategies import shortstrs

NS = Namespace("public", "default")

EXAMPLES = [
    # Common names are left alone: native Pulsar users see these topics.
    ("orders", None, "orders"),
    ("my_exchange", None, "my_exchange"),
    ("orders", "orders.created", "orders__orders.created"),
    ("events-v2", "eu.west:1", "events-v2__eu.west:1"),
    ("snake_case_x", "key_with_under_scores", "snake_case_x__key_with_under_scores"),
    ("amq.topic", "a.b.c", "amq.topic__a.b.c"),
    # The default exchange (reference/002) and the empty routing key.
    ("", "my-queue", "amq.default__my-queue"),
    ("", None, "amq.default"),
    ("x", "", "x__"),
    # Keys may hold "__" (the first "__" is the separator); exchanges may not.
    ("a", "b__c", "a__b__c"),
    ("a__b", "c", "a_=5Fb__c"),
    ("a_", "b", "a=5F__b"),
    ("a", "_b", "a___b"),
    ("_", None, "=5F"),
    # Everything else is =XX per UTF-8 octet; "=" itself is escaped.
    ("my exchange", "a/b", "my=20exchange__a=2Fb"),
    ("100%", "#.*", "100=25__=23.=2A"),
    ("caf\u00e9", "\u20ac", "caf=C3=A9__=E2=82=AC"),
    ("a=b", "=", "a=3Db__=3D"),
    # Names Pulsar would read as something else get one character escaped.
    ("amq.default", None, "amq=2Edefault"),
    (".", None, "=2E"),
    ("..", "k", "=2E.__k"),
    ("t-partition-3", None, "t-partition=2D3"),
    ("t", "k-partition-0", "t__k-partition=2D0"),
    ("t", "transaction_pending_ack", "t__transaction_pending_ac=6B"),
]


@pytest.mark.parametrize(("exchange", "key", "local"), EXAMPLES)
def test_examples(exchange: str, key: str | None, local: str) -> None:
    assert encode_local_name(exchange, key) == local
    assert decode_local_name(local) == (exchange, key)
    assert topic_for(NS, exchange, key) == f"persistent://public/default/{local}"
    assert local_topic_problem(local) is None


def test_default_exchange_constant() -> None:
    assert DEFAULT_EXCHANGE_TOPIC == "amq.default"


# ------------------------------------------------------------------------------ properties


@given(exchange=shortstrs(), key=st.none() | shortstrs())
def test_round_trip_and_legal(exchange: str, key: str | None) -> None:
    local = encode_local_name(exchange, key)
    assert local_topic_problem(local) is None, local
    assert decode_local_name(local) == (exchange, key)
    full = topic_for(NS, exchange, key)
    assert parse_topic(full) == (NS, exchange, key)
    # Worst case: every octet escaped on both sides.
    assert len(local) <= 3 * 255 + 2 + 3 * 255


@given(
    a=st.tuples(shortstrs(), st.none() | shortstrs()),
    b=st.tuples(shortstrs(), st.none() | shortstrs()),
)
def test_distinct_inputs_never_collide(
    a: tuple[str, str | None], b: tuple[str, str | None]
) -> None:
    assume(a != b)
    assert encode_local_name(*a) != encode_local_name(*b)


@given(
    a=st.tuples(st.text("_a=", max_size=6), st.none() | st.text("_a=", max_size=6)),
    b=st.tuples(st.text("_a=", max_size=6), st.none() | st.text("_a=", max_size=6)),
)
def test_distinct_inputs_never_collide_small_alphabet(
    a: tuple[str, str | None], b: tuple[str, str | None]
) -> None:
    # A small alphabet of the characters the separator rules are about makes near-misses
    # (a_ + __ + b versus a + __ + _b) likely.
    assume(a != b)
    assert encode_local_name(*a) != encode_local_name(*b)


# Names like my_exchange, orders.created, events-v2: alphanumeric words joined by . _ -
_words = st.text(string.ascii_letters + string.digits, min_size=1, max_size=12)
readable = st.builds(
    lambda first, rest: first + "".join(sep + word for sep, word in rest),
    _words,
    st.lists(st.tuples(st.sampled_from("._-"), _words), max_size=6),
).filter(lambda s: "-partition-" not in s and s != "amq.default")


@given(exchange=readable, key=st.none() | readable)
def test_common_names_are_unchanged(exchange: str, key: str | None) -> None:
    expected = exchange if key is None else f"{exchange}__{key}"
    assert encode_local_name(exchange, key) == expected


@given(st.text(max_size=40) | st.text("_=aA2F5-.", max_size=20))
def test_decoding_any_name_is_safe_and_only_accepts_canonical_names(local: str) -> None:
    decoded = decode_local_name(local)
    if decoded is not None:
        assert encode_local_name(*decoded) == local


@pytest.mark.parametrize(
    "full",
    [
        "non-persistent://public/default/x",
        "persistent://public/default",
        "persistent://public/c/default/x",  # legacy four-part name
        "persistent://public/default/a=5Fb",  # not canonical: we write "a_b"
        "persistent://public/default/a=2f",  # lower-case hex
        "persistent://public/default/a=",  # stray escape
        "persistent://public/default/=FF",  # not UTF-8
        "persistent://public/default/x-partition-0",  # a partition
        "persistent://public/default/__change_events",
        "persistent://public/default/a b",
        "persistent://pub lic/default/x",
    ],
)
def test_parse_topic_refuses_names_we_never_write(full: str) -> None:
    with pytest.raises(ValueError):
        parse_topic(full)


def test_keys_for_exchange() -> None:
    names = [
        topic_for(NS, "logs", "a.b"),
        topic_for(NS, "logs", ""),
        topic_for(NS, "logs", None),  # keyless: not a key topic
        topic_for(NS, "logs2", "a.b"),  # another exchange
        topic_for(NS, "logs_", "x"),  # another exchange whose name extends ours
        "persistent://public/default/logs__a.b-partition-0",  # a partition: not ours
        "persistent://public/default/native-topic",
        encode_local_name("logs", "c d"),  # local names work too
    ]
    assert keys_for_exchange("logs", names) == {
        "a.b": names[0],
        "": names[1],
        "c d": names[7],
    }


def test_encode_refuses_text_that_is_not_utf8() -> None:
    with pytest.raises(ValueError):
        encode_local_name("\udcff", None)
    with pytest.raises(TypeError):
        encode_local_name(b"x", None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- subscriptions


@pytest.mark.parametrize(
    ("queue", "generation", "name"),
    [
        ("orders", 0, "orders__0"),
        ("my_queue", 3, "my_queue__3"),
        ("celery@host.celery.pidbox", 0, "celery=40host.celery.pidbox__0"),
        ("amq.gen-Xy_Z-1aB", 12, "amq.gen-Xy_Z-1aB__12"),
        ("a__b", 1, "a_=5Fb__1"),
        ("pulsar.dedup", 0, "=70ulsar.dedup__0"),
        ("pulsar.repl.east", 0, "=70ulsar.repl.east__0"),
        ("q_", 0, "q=5F__0"),
    ],
)
def test_subscription_examples(queue: str, generation: int, name: str) -> None:
    assert subscription_for(queue, generation) == name
    assert parse_subscription(name) == (queue, generation)
    assert subscription_problem(name) is None


@given(queue=shortstrs(min_size=1), generation=st.integers(min_value=0, max_value=2**63))
def test_subscription_round_trip_and_legal(queue: str, generation: int) -> None:
    name = subscription_for(queue, generation)
    assert subscription_problem(name) is None, name
    assert parse_subscription(name) == (queue, generation)


@given(
    a=st.tuples(shortstrs(min_size=1), st.integers(0, 5)),
    b=st.tuples(shortstrs(min_size=1), st.integers(0, 5)),
)
def test_subscriptions_never_collide(a: tuple[str, int], b: tuple[str, int]) -> None:
    assume(a != b)
    assert subscription_for(*a) != subscription_for(*b)


@given(st.text(max_size=30) | st.text("_=0123a7p.", max_size=16))
def test_parse_subscription_only_accepts_canonical_names(name: str) -> None:
    parsed = parse_subscription(name)
    if parsed is not None:
        assert subscription_for(*parsed) == name


@pytest.mark.parametrize("name", ["q", "q__", "q__01", "q__-1", "__0", "pulsar.dedup__0", "q__x"])
def test_parse_subscription_refuses(name: str) -> None:
    assert parse_subscription(name) is None


@pytest.mark.parametrize("generation", [-1, 1.0, True, "1"])
def test_subscription_generation_must_be_a_natural_number(generation: object) -> None:
    with pytest.raises(ValueError):
        subscription_for("q", generation)  # type: ignore[arg-type]


def test_subscription_needs_a_queue_name() -> None:
    with pytest.raises(ValueError):
        subscription_for("")


# ---------------------------------------------------------------------- server-named queues

SERVER_NAMED = re.compile(r"amq\.gen-[A-Za-z0-9_-]{22}")


def test_server_named_queue_format_with_injected_randomness() -> None:
    assert server_named_queue(lambda n: bytes(range(n))) == "amq.gen-AAECAwQFBgcICQoLDA0ODw"
    # url-safe alphabet: 0xfb 0xff would be "+/" in standard base64.
    name = server_named_queue(lambda n: b"\xfb\xff" * (n // 2))
    assert SERVER_NAMED.fullmatch(name)
    assert "-_" in name


def test_server_named_queue_is_random() -> None:
    names = {server_named_queue() for _ in range(100)}
    assert len(names) == 100
    assert all(SERVER_NAMED.fullmatch(name) for name in names)


def test_server_named_queue_needs_16_octets() -> None:
    with pytest.raises(ValueError):
        server_named_queue(lambda n: b"x" * (n - 1))
