"""gateway/model/json_values.py: AMQP field values as JSON and back."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.fieldtable import Field
from gateway.model.json_values import (
    NotATable,
    field_from_json,
    json_value,
    table_from_json,
    table_json,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(JSON)
def test_json_survives_the_round_trip(value: object) -> None:
    assert json_value(field_from_json(value)) == value


def test_what_json_has_no_type_for_is_shown_readably() -> None:
    table = {
        "b": Field("x", b"\xffok"),
        "d": Field("D", Decimal("1.50")),
        "i": Field("D", Decimal("2")),
        "t": Field("T", 1700000000),
        "when": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
        "nested": Field("F", {"a": Field("A", [Field("I", 1), Field("S", "s")])}),
        "nan": float("nan"),
    }
    assert table_json(table) == {
        "b": "\ufffdok",
        "d": 1.5,
        "i": 2,
        "t": 1700000000,
        "when": 1704067200,
        "nested": {"a": [1, "s"]},
        "nan": "nan",
    }


def test_integers_become_longs_as_in_rabbitmq() -> None:
    assert table_from_json({"x-max-length": 10, "f": 1.5, "ok": True}) == {
        "x-max-length": Field("l", 10),
        "f": Field("d", 1.5),
        "ok": Field("t", True),
    }
    assert table_from_json(None) == {}
    with pytest.raises(NotATable):
        table_from_json([1])
    with pytest.raises(ValueError, match="does not fit"):
        field_from_json(1 << 64)
