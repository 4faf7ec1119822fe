"""Hypothesis strategies for AMQP values."""

from __future__ import annotations

import string
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

from gateway.amqp.fieldtable import Field
from gateway.amqp.properties import MessageProperties

# The characters pamqp's name regex accepts, for values pamqp must be able to marshal.
PAMQP_NAME_CHARS = string.ascii_letters + string.digits + "-_.:@#,/+ "


def utf8_text(max_bytes: int = 255) -> st.SearchStrategy[str]:
    # At most 4 octets per character: never over the limit, no filtering needed.
    return st.text(st.characters(exclude_categories=["Cs"]), max_size=max_bytes // 4)


def pamqp_names(max_size: int = 127) -> st.SearchStrategy[str]:
    return st.text(PAMQP_NAME_CHARS, max_size=max_size)


def shortstr_values() -> st.SearchStrategy[str | bytes]:
    """What a short-string property can hold: UTF-8 text, or arbitrary non-UTF-8 octets."""

    def not_utf8(raw: bytes) -> bool:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return True
        return False

    return utf8_text() | st.binary(min_size=1, max_size=255).filter(not_utf8)


_INT_BOUNDS = {
    "b": (-(2**7), 2**7 - 1),
    "B": (0, 2**8 - 1),
    "s": (-(2**15), 2**15 - 1),
    "u": (0, 2**16 - 1),
    "I": (-(2**31), 2**31 - 1),
    "i": (0, 2**32 - 1),
    "l": (-(2**63), 2**63 - 1),
    "L": (0, 2**64 - 1),
    "T": (0, 2**64 - 1),
}


def _decimals() -> st.SearchStrategy[Decimal]:
    return st.builds(
        lambda scale, unscaled: Decimal(f"{unscaled}E-{scale}"),
        st.integers(0, 255),
        st.integers(-(2**31), 2**31 - 1),
    )


def scalar_fields() -> st.SearchStrategy[Field]:
    ints = st.one_of(
        *(
            st.builds(Field, st.just(kind), st.integers(low, high))
            for kind, (low, high) in _INT_BOUNDS.items()
        )
    )
    return st.one_of(
        ints,
        st.builds(Field, st.just("t"), st.booleans()),
        st.builds(Field, st.just("f"), st.floats(width=32, allow_nan=False)),
        st.builds(Field, st.just("d"), st.floats(allow_nan=False)),
        st.builds(Field, st.just("D"), _decimals()),
        st.builds(Field, st.just("S"), shortstr_values()),
        st.builds(Field, st.just("x"), st.binary(max_size=64)),
        st.just(Field("V", None)),
    )


def table_keys() -> st.SearchStrategy[str]:
    return utf8_text(60)


def fields() -> st.SearchStrategy[Field]:
    return st.recursive(
        scalar_fields(),
        lambda children: st.one_of(
            st.builds(Field, st.just("A"), st.lists(children, max_size=4)),
            st.builds(Field, st.just("F"), st.dictionaries(table_keys(), children, max_size=4)),
        ),
        max_leaves=12,
    )


def tables() -> st.SearchStrategy[dict[str, Field]]:
    return st.dictionaries(table_keys(), fields(), max_size=6)


def message_properties() -> st.SearchStrategy[MessageProperties]:
    short = st.none() | shortstr_values()
    return st.builds(
        MessageProperties,
        content_type=short,
        content_encoding=short,
        headers=st.none() | tables(),
        delivery_mode=st.none() | st.integers(0, 255),
        priority=st.none() | st.integers(0, 255),
        correlation_id=short,
        reply_to=short,
        expiration=short,
        message_id=short,
        timestamp=st.none() | st.integers(0, 2**64 - 1),
        type=short,
        user_id=short,
        app_id=short,
        cluster_id=short,
    )


# Plain values that pamqp and our codec both encode and decode to the same thing.
def plain_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        utf8_text(100),
        st.none(),
        st.builds(
            lambda scale, unscaled: Decimal(f"{unscaled}E-{scale}"),
            st.integers(0, 10),
            st.integers(-(2**31), 2**31 - 1),
        ),
    )
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(PAMQP_NAME_CHARS, max_size=20), children, max_size=3)
        ),
        max_leaves=8,
    )


def plain_tables() -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.text(PAMQP_NAME_CHARS, max_size=20), plain_values(), max_size=5)
