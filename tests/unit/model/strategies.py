"""Hypothesis strategies for AMQP names, keys and header values."""

from __future__ import annotations

from hypothesis import strategies as st

from gateway.amqp.fieldtable import Field

# Characters that exercise every rule of the name encoding: the separator, the escape
# character, Pulsar's partition and system-topic markers, URL metacharacters, multi-octet text.
_TRICKY = "_=-.:%/#* ap\u00e9\u20ac\U0001f600"
_PIECES = (
    *("_", "__", "-partition-", "partition", "0", "1", "=", "=3D", "amq.default", "."),
    *("transaction_pending_ack", "pulsar.", "a", "-"),
)


def _fit(text: str, limit: int = 255) -> str:
    """Cut ``text`` to at most ``limit`` UTF-8 octets on a character boundary."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", "ignore")


def shortstrs(min_size: int = 0) -> st.SearchStrategy[str]:
    """Any AMQP shortstr: 0-255 octets of UTF-8 (no surrogates: they are not UTF-8)."""
    any_text = st.text(st.characters(exclude_categories=["Cs"]), min_size=min_size, max_size=255)
    tricky = st.text(st.sampled_from(_TRICKY), min_size=min_size, max_size=255)
    pieces = st.lists(
        st.sampled_from(_PIECES),
        min_size=min_size,
        max_size=12,
    ).map("".join)
    return st.one_of(any_text, tricky, pieces).map(_fit).filter(lambda s: len(s) >= min_size)


def topic_words() -> st.SearchStrategy[str]:
    return st.sampled_from(["a", "b", "", "ab", "a*", "#a"])


def routing_keys() -> st.SearchStrategy[str]:
    return st.lists(topic_words(), max_size=7).map(".".join)


def binding_keys() -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(["a", "b", "", "*", "#", "a*"]), max_size=7).map(".".join)


# Values chosen so that Erlang-style equality has interesting cases: 1 as several integer
# types, as a float, as a string and as bytes, a boolean, void.
HEADER_VALUES = [
    Field("I", 1),
    Field("l", 1),
    Field("b", 1),
    Field("T", 1),
    Field("d", 1.0),
    Field("I", 2),
    Field("S", "1"),
    Field("x", b"1"),
    Field("S", "a"),
    Field("t", True),
    Field("t", False),
    Field("V", None),
]


def header_tables() -> st.SearchStrategy[dict[str, Field]]:
    return st.dictionaries(
        st.sampled_from(["h1", "h2", "h3", "x-h", "x-match"]),
        st.sampled_from(HEADER_VALUES),
        max_size=5,
    )
