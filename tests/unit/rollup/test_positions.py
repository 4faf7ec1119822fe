"""Offsets of the Pulsar source: serialized message ids, and their order with batches."""

from __future__ import annotations

import pulsar
import pytest

from gateway.rollup import positions


def message_id(ledger: int, entry: int, batch: int = -1) -> object:
    return pulsar.MessageId(-1, ledger, entry, batch)


def test_a_position_round_trips_through_its_offset_form() -> None:
    original = message_id(7, 42, 3)
    decoded = positions.decode(positions.encode(original))
    assert positions.describe(decoded) == "7:42:3"
    assert positions.sort_key(decoded) == positions.sort_key(original)


def test_earliest_sorts_before_every_message() -> None:
    earliest = positions.sort_key(positions.decode(positions.EARLIEST))
    assert earliest < positions.sort_key(message_id(0, 0))
    assert earliest < positions.sort_key(message_id(0, 0, 0))


def test_an_entry_position_covers_every_message_of_its_batch() -> None:
    # The broker's last-message id names the entry (batch index -1): the messages inside that
    # entry are at or before it, the next entry after it.
    entry = positions.sort_key(message_id(5, 9))
    assert positions.sort_key(message_id(5, 9, 0)) < entry
    assert positions.sort_key(message_id(5, 9, 99)) < entry
    assert positions.sort_key(message_id(5, 10, 0)) > entry
    assert positions.sort_key(message_id(5, 8)) < positions.sort_key(message_id(5, 9, 0))


@pytest.mark.parametrize("text", ["", "zz", "AAAA", "not base64!", "€"])
def test_a_position_that_is_no_message_id_is_refused(text: str) -> None:
    with pytest.raises(positions.InvalidPosition, match="not a serialized message id"):
        positions.decode(text)
