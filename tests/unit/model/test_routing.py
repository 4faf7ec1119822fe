"""Routing: topic patterns against a reference matcher, headers tables, the Router."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.amqp.errors import ChannelError
from gateway.amqp.fieldtable import Field
from gateway.model.entities import Binding, Exchange, ExchangeType
from gateway.model.naming import topic_for
from gateway.model.routing import (
    Router,
    XMatch,
    binding_topics,
    compile_topic,
    headers_match,
    patterns_matching,
    publish_topic,
    split_words,
    topic_matches,
    topics_matching,
    validate_binding,
)
from gateway.model.vhost import Namespace
from tests.unit.model.strategies import (
    HEADER_VALUES,
    binding_keys,
    header_tables,
    routing_keys,
)

# ------------------------------------------------------------------------- topic: oracle


def reference_words(key: str) -> list[str]:
    # rabbit_db_topic_exchange:split_topic_key: the empty key has no words.
    return key.split(".") if key else []


def reference_match(pattern: Sequence[str], words: Sequence[str]) -> bool:
    """The textbook recursive matcher: exponential at worst, obviously right."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return reference_match(rest, words) or (bool(words) and reference_match(pattern, words[1:]))
    if not words:
        return False
    return (head == "*" or head == words[0]) and reference_match(rest, words[1:])


@given(pattern=binding_keys(), key=routing_keys())
def test_topic_matching_agrees_with_reference(pattern: str, key: str) -> None:
    expected = reference_match(reference_words(pattern), reference_words(key))
    assert topic_matches(pattern, key) is expected
    assert compile_topic(pattern).matches_words(split_words(key)) is expected


@given(pattern=st.text(".*#ab", max_size=12), key=st.text(".ab", max_size=12))
def test_topic_matching_agrees_with_reference_on_raw_text(pattern: str, key: str) -> None:
    expected = reference_match(reference_words(pattern), reference_words(key))
    assert topic_matches(pattern, key) is expected


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("#", "", True),
        ("#", "a.b.c", True),
        ("*", "", False),  # the empty key has no words
        ("*", "a", True),
        ("*", ".", False),  # "." is two empty words
        ("*.*", ".", True),
        ("", "", True),
        ("", "a", False),
        ("#.#", "a", True),
        ("#.#", "", True),
        ("a.#", "a", True),
        ("#.a", "a", True),
        ("a.#.b", "a.b", True),
        ("a.#.b", "a.x.y.b", True),
        ("a.#.b", "a.b.c", False),
        ("a.*.b", "a..b", True),  # "*" matches an empty word
        ("a.*", "a.", True),
        ("a.*", "a", False),
        ("*.#.*", "a", False),
        ("*.#.*", "a.b", True),
        ("#.*.#", "", False),
        ("a*", "ab", False),  # wildcards are whole words only
        ("a*", "a*", True),
        ("#a", "#a", True),
        ("orders.*.created", "orders.eu.created", True),
        ("orders.*.created", "orders.eu.west.created", False),
        ("#.a.#.a.#.b", "a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.c", False),
    ],
)
def test_topic_table(pattern: str, key: str, expected: bool) -> None:
    assert topic_matches(pattern, key) is expected


def test_pathological_pattern_is_matched_without_backtracking_blowup() -> None:
    # Many "#"s against a long key that almost matches: a backtracking matcher explores
    # O(words^hashes) placements; the segment matcher is linear per segment.
    pattern = ".".join(["#", "a"] * 12 + ["b"])
    key = ".".join(["a"] * 2000)
    assert not topic_matches(pattern, key)
    assert topic_matches(pattern, key + ".b")


def test_split_words() -> None:
    assert split_words("") == ()
    assert split_words("a") == ("a",)
    assert split_words("a.") == ("a", "")
    assert split_words("..") == ("", "", "")


def test_topics_and_patterns_matching() -> None:
    assert topics_matching("orders.#", ["orders", "orders.eu", "payments.eu", ""]) == [
        "orders",
        "orders.eu",
    ]
    bindings = [
        Binding("q1", "t", "orders.*"),
        Binding("q2", "t", "#"),
        Binding("q3", "t", "payments.#"),
        Binding("q4", "t", "orders.eu"),
    ]
    assert patterns_matching("orders.eu", bindings) == [bindings[0], bindings[1], bindings[3]]
    assert patterns_matching("", bindings) == [bindings[1]]


@given(key=routing_keys(), patterns=st.lists(binding_keys(), max_size=6))
def test_patterns_matching_and_topics_matching_agree(key: str, patterns: list[str]) -> None:
    bindings = [Binding(f"q{i}", "t", p) for i, p in enumerate(patterns)]
    by_binding = {b.queue for b in patterns_matching(key, bindings)}
    by_topic = {b.queue for b in bindings if topics_matching(b.routing_key, [key]) == [key]}
    assert by_binding == by_topic


# -------------------------------------------------------------------------------- headers

I1, L1, D1, S1, X1 = (
    Field("I", 1),
    Field("l", 1),
    Field("d", 1.0),
    Field("S", "1"),
    Field("x", b"1"),
)
TRUE, VOID = Field("t", True), Field("V", None)


def mode(value: str) -> dict[str, Field]:
    return {"x-match": Field("S", value)}


HEADERS_TABLE: list[tuple[dict[str, Field], dict[str, Field] | None, bool]] = [
    # all (and absent x-match): every argument must match
    ({"a": I1, "b": S1}, {"a": I1, "b": S1, "c": TRUE}, True),
    ({"a": I1, "b": S1}, {"a": I1}, False),
    ({**mode("all"), "a": I1, "b": S1}, {"a": I1, "b": Field("S", "2")}, False),
    ({**mode("all"), "a": I1}, {"a": I1}, True),
    # any: one argument is enough
    ({**mode("any"), "a": I1, "b": S1}, {"b": S1}, True),
    ({**mode("any"), "a": I1, "b": S1}, {"c": S1}, False),
    ({**mode("any"), "a": I1}, None, False),
    # values compare as Erlang terms: type tags aside, 1 == 1.0, "1" is not 1, bytes == str
    ({"a": I1}, {"a": L1}, True),
    ({"a": I1}, {"a": Field("T", 1)}, True),
    ({"a": I1}, {"a": D1}, True),
    ({"a": I1}, {"a": S1}, False),
    ({"a": S1}, {"a": X1}, True),
    ({"a": TRUE}, {"a": I1}, False),
    ({"a": TRUE}, {"a": Field("S", "true")}, False),
    ({"a": Field("D", Decimal("1.0"))}, {"a": I1}, False),
    # void in a binding matches presence only; a void header is a value like any other
    ({"a": VOID}, {"a": S1}, True),
    ({"a": VOID}, {"b": S1}, False),
    ({"a": VOID}, {"a": VOID}, True),
    ({"a": S1}, {"a": VOID}, False),
    ({**mode("any"), "a": VOID, "b": I1}, {"a": Field("S", "")}, True),
    # x- arguments are ignored by all/any...
    ({"x-a": I1}, {}, True),
    ({**mode("any"), "x-a": I1}, {"x-a": I1}, False),
    ({"x-a": I1, "b": I1}, {"b": I1}, True),
    # ...and compared by all-with-x/any-with-x (x-match itself never is)
    ({**mode("all-with-x"), "x-a": I1}, {}, False),
    ({**mode("all-with-x"), "x-a": I1}, {"x-a": I1}, True),
    ({**mode("all-with-x"), "x-a": I1, "b": I1}, {"x-a": I1}, False),
    ({**mode("any-with-x"), "x-a": I1, "b": I1}, {"x-a": I1}, True),
    ({**mode("any-with-x"), "x-a": I1}, {"x-b": I1}, False),
    ({**mode("all-with-x")}, {"x-match": Field("S", "x")}, True),
    # nothing to compare: all matches everything, any nothing
    ({}, {}, True),
    ({}, None, True),
    (mode("any"), {"a": I1}, False),
    (mode("any-with-x"), {"x-match": Field("S", "any-with-x")}, False),
    # nested values keep their inner types
    ({"a": Field("A", [I1])}, {"a": Field("A", [L1])}, False),
    ({"a": Field("A", [I1])}, {"a": Field("A", [I1])}, True),
    ({"a": Field("F", {"k": S1})}, {"a": Field("F", {"k": S1})}, True),
]


@pytest.mark.parametrize(("arguments", "headers", "expected"), HEADERS_TABLE)
def test_headers_table(
    arguments: dict[str, Field], headers: dict[str, Field] | None, expected: bool
) -> None:
    assert headers_match(arguments, headers) is expected


def erlang_value(field: Field) -> object:
    """How the Erlang side holds a header value (an independent, simpler model)."""
    if field.kind == "t":
        return ("atom", field.value)
    if field.kind == "V":
        return ("atom", "undefined")
    if field.kind in ("S", "x"):
        return field.value.encode() if isinstance(field.value, str) else field.value
    return field.value  # numbers: Python's 1 == 1.0 is Erlang's ==


def rabbit_headers_match(args: Mapping[str, Field], data: Mapping[str, Field] | None) -> bool:
    """rabbit_exchange_type_headers:headers_match/5, transcribed as a merge over sorted lists."""
    x_match = args.get("x-match")
    kind = "all"
    if x_match is not None and x_match.kind == "S" and x_match.value in {m.value for m in XMatch}:
        kind = x_match.value
    pattern = sorted(args.items())
    values = sorted((data or {}).items())
    all_match, any_match = True, False
    while True:
        if not all_match and kind in ("all", "all-with-x"):
            return False
        if any_match and kind in ("any", "any-with-x"):
            return True
        if not pattern:
            return all_match if kind in ("all", "all-with-x") else any_match
        pk, pv = pattern[0]
        if pk == "x-match" or (pk.startswith("x-") and kind in ("all", "any")):
            pattern = pattern[1:]
            continue
        if not values:
            pattern, all_match = [], False
            continue
        dk, dv = values[0]
        if pk > dk:
            values = values[1:]
        elif pk < dk:
            pattern, all_match = pattern[1:], False
        elif pv.kind == "V" or erlang_value(pv) == erlang_value(dv):
            pattern, values, any_match = pattern[1:], values[1:], True
        else:
            pattern, values, all_match = pattern[1:], values[1:], False


modes = st.sampled_from([None, "all", "any", "all-with-x", "any-with-x"])


@given(arguments=header_tables(), x_match=modes, headers=st.none() | header_tables())
def test_headers_matching_agrees_with_rabbitmq_algorithm(
    arguments: dict[str, Field], x_match: str | None, headers: dict[str, Field] | None
) -> None:
    if x_match is not None:
        arguments = {**arguments, "x-match": Field("S", x_match)}
    assert headers_match(arguments, headers) is rabbit_headers_match(arguments, headers)


def test_header_values_strategy_covers_types() -> None:
    assert {f.kind for f in HEADER_VALUES} >= {"I", "l", "d", "S", "x", "t", "V"}


@pytest.mark.parametrize(
    ("x_match", "text"),
    [
        (
            Field("S", "most"),
            'PRECONDITION_FAILED - Invalid x-match field value <<"most">>; expected all, any, '
            "all-with-x, or any-with-x",
        ),
        (
            Field("I", 1),
            "PRECONDITION_FAILED - Invalid x-match field type signedint (value 1); expected "
            "longstr",
        ),
        (
            Field("x", b"any"),
            'PRECONDITION_FAILED - Invalid x-match field type binary (value <<"any">>); '
            "expected longstr",
        ),
    ],
)
def test_invalid_x_match_is_406(x_match: Field, text: str) -> None:
    with pytest.raises(ChannelError) as caught:
        validate_binding(ExchangeType.HEADERS, {"x-match": x_match})
    assert (caught.value.reply_code, caught.value.reply_text) == (406, text)


def test_valid_bindings() -> None:
    for value in XMatch:
        validate_binding(ExchangeType.HEADERS, {"x-match": Field("S", value.value)})
    validate_binding(ExchangeType.HEADERS, {})
    # Only headers exchanges look at x-match.
    validate_binding(ExchangeType.TOPIC, {"x-match": Field("S", "most")})


# --------------------------------------------------------------------------------- router


def test_direct_router() -> None:
    router = Router(
        ExchangeType.DIRECT,
        [Binding("q1", "d", "a"), Binding("q2", "d", "a"), Binding("q3", "d", "b")],
    )
    assert router.route("a") == {"q1", "q2"}
    assert router.route("b") == {"q3"}
    assert router.route("*") == set()
    assert router.route("") == set()


def test_default_exchange_router_from_implicit_bindings() -> None:
    router = Router(ExchangeType.DIRECT, [Binding(q, "", q) for q in ("orders", "audit")])
    assert router.route("orders") == {"orders"}
    assert router.route("nope") == set()


def test_fanout_router_ignores_the_key() -> None:
    router = Router(ExchangeType.FANOUT, [Binding("q1", "f", "x"), Binding("q2", "f", "")])
    assert router.route("anything") == {"q1", "q2"}
    assert Router(ExchangeType.FANOUT).route("k") == set()


def test_topic_router() -> None:
    router = Router(
        ExchangeType.TOPIC,
        [
            Binding("eu", "t", "orders.eu.*"),
            Binding("all", "t", "#"),
            Binding("created", "t", "*.*.created"),
            Binding("exact", "t", "orders.eu.created"),
            Binding("exact2", "t", "orders.eu.created"),
            Binding("eu", "t", "orders.eu.created"),  # same queue twice: delivered once
        ],
    )
    assert router.route("orders.eu.created") == {"eu", "all", "created", "exact", "exact2"}
    assert router.route("orders.us.created") == {"all", "created"}
    assert router.route("") == {"all"}
    assert [b.queue for b in router.patterns_matching("orders.eu.x")] != []
    assert {b.queue for b in router.patterns_matching("orders.eu.x")} == {"eu", "all"}


@settings(max_examples=400)
@given(
    bindings=st.lists(
        st.tuples(st.sampled_from(["q1", "q2", "q3", "q4"]), binding_keys()), max_size=12
    ),
    key=routing_keys(),
)
def test_topic_router_agrees_with_reference(bindings: list[tuple[str, str]], key: str) -> None:
    router = Router(ExchangeType.TOPIC, [Binding(q, "t", p) for q, p in bindings])
    expected = {q for q, p in bindings if reference_match(reference_words(p), reference_words(key))}
    assert router.route(key) == expected


def test_headers_router() -> None:
    router = Router(
        ExchangeType.HEADERS,
        [
            Binding("pdf", "h", "", {"format": Field("S", "pdf"), "type": Field("S", "report")}),
            Binding("any", "h", "", {"x-match": Field("S", "any"), "format": Field("S", "pdf")}),
            Binding("everything", "h", "", {}),
        ],
    )
    pdf_report = {"format": Field("S", "pdf"), "type": Field("S", "report")}
    assert router.route("ignored", pdf_report) == {"pdf", "any", "everything"}
    assert router.route("", {"format": Field("S", "pdf")}) == {"any", "everything"}
    assert router.route("", None) == {"everything"}


def test_topic_router_with_many_hashes_on_a_long_key() -> None:
    # The router's trie visits each (node, word) once: many "#"s stay cheap and correct.
    pattern = ".".join(["#", "a"] * 12 + ["b"])
    router = Router(ExchangeType.TOPIC, [Binding("q", "t", pattern), Binding("r", "t", "#.c")])
    key = ".".join(["a"] * 2000)
    assert router.route(key) == set()
    assert router.route(key + ".b") == {"q"}
    assert router.route(key + ".c") == {"r"}


def test_router_is_rebuilt_on_change() -> None:
    first = Binding("q1", "t", "a.*")
    router = Router(ExchangeType.TOPIC, [first])
    grown = router.with_binding(Binding("q2", "t", "a.b"))
    assert router.route("a.b") == {"q1"}
    assert grown.route("a.b") == {"q1", "q2"}
    assert grown.without_binding(first).route("a.b") == {"q2"}
    assert grown.bindings == {first, Binding("q2", "t", "a.b")}


# ---------------------------------------------------------------------------- topic choice

NS = Namespace("t", "n")


def test_publish_topic() -> None:
    direct = Exchange("d", ExchangeType.DIRECT)
    fanout = Exchange("f", ExchangeType.FANOUT)
    topic = Exchange("t", ExchangeType.TOPIC)
    headers = Exchange("h", ExchangeType.HEADERS)
    assert publish_topic(NS, direct, "k") == "persistent://t/n/d__k"
    assert publish_topic(NS, topic, "a.b") == "persistent://t/n/t__a.b"
    assert publish_topic(NS, fanout, "k") == "persistent://t/n/f"
    assert publish_topic(NS, headers, "k") == "persistent://t/n/h"
    default = Exchange("", ExchangeType.DIRECT, durable=True)
    assert publish_topic(NS, default, "q") == "persistent://t/n/amq.default__q"


def test_binding_topics() -> None:
    topic = Exchange("logs", ExchangeType.TOPIC)
    existing = ["app.error", "app.info", "db.error", ""]
    assert binding_topics(NS, topic, Binding("q", "logs", "*.error"), existing) == [
        topic_for(NS, "logs", "app.error"),
        topic_for(NS, "logs", "db.error"),
    ]
    # A key without wildcards names its one topic, existing or not.
    assert binding_topics(NS, topic, Binding("q", "logs", "new.key"), existing) == [
        topic_for(NS, "logs", "new.key")
    ]
    direct = Exchange("d", ExchangeType.DIRECT)
    assert binding_topics(NS, direct, Binding("q", "d", "#")) == [topic_for(NS, "d", "#")]
    fanout = Exchange("f", ExchangeType.FANOUT)
    assert binding_topics(NS, fanout, Binding("q", "f", "x")) == [topic_for(NS, "f", None)]
