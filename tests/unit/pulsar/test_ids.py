"""Message ids as values: ordering, round trips through REST text and the native client."""

from __future__ import annotations

import pytest

from gateway.pulsar.ids import EARLIEST, LATEST, MessageId


def test_message_id_ordering_and_round_trips() -> None:
    a = MessageId(10, 5)
    b = MessageId(10, 6)
    c = MessageId(11, 0)
    batched = [MessageId(10, 5, i) for i in range(3)]
    assert sorted([c, b, a]) == [a, b, c]
    assert batched == sorted(batched)
    assert EARLIEST < a < LATEST
    for mid in (a, MessageId(1, 2, 3, 4), EARLIEST, LATEST):
        assert MessageId.parse(str(mid)) == mid
        assert MessageId.from_rest(mid.to_rest()) == mid


def test_message_id_from_rest_defaults_and_bad_text() -> None:
    assert MessageId.from_rest({"ledgerId": 3, "entryId": -1}) == MessageId(3, -1, -1, -1)
    with pytest.raises(ValueError):
        MessageId.parse("1:2")


def test_message_id_native_round_trip() -> None:
    mid = MessageId(7, 8, 2, -1)
    native = mid.to_native()
    assert (native.ledger_id(), native.entry_id(), native.batch_index()) == (7, 8, 2)
    assert MessageId.from_native(native) == mid
