"""Message ids as values: ordering, round trips through REST text and the native client."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.pulsar.ids import (
    EARLIEST,
    LATEST,
    BatchPosition,
    MessageId,
    batch_position,
    is_chunked,
)


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


def test_batch_position_of_a_message_of_a_batch() -> None:
    # pulsar-client 3.x serialized the second message of a batch of three in entry 525:0 so
    # (ledgerId 1, entryId 2, batch_index 4, batch_size 6; no partition: -1).
    assert batch_position(bytes.fromhex("088d04100020013003")) == BatchPosition((525, 0, -1), 1, 3)


@given(
    ledger=st.integers(0, 2**63 - 1),
    entry=st.integers(0, 2**63 - 1),
    index=st.integers(-1, 2**31 - 1),
    partition=st.integers(-1, 2**31 - 1),
)
def test_batch_position_reads_what_pulsar_client_serializes(
    ledger: int, entry: int, index: int, partition: int
) -> None:
    native = MessageId(ledger, entry, index, partition).to_native()
    position = batch_position(bytes(native.serialize()))
    # A MessageId made by hand carries no batch size (a received one does: above).
    assert position == BatchPosition((ledger, entry, partition), index, 0)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x08", b"\x08\x01", b"\x10\x01", b"\x08\x01\x10\x01\x2a\x05", b"\x08\x01\x10\x01\x0b"],
)
def test_batch_position_refuses_what_is_not_a_message_id(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a serialized message id"):
        batch_position(data)


def test_a_chunked_messages_id_is_told_apart() -> None:
    # pulsar-client 3.13 serialized these received from Pulsar 4.0: a message of two chunks
    # (entries 60:0 and 60:1; its id names the last, with the first in field 7) and the
    # plain message after it.
    chunked = bytes.fromhex("083c10013a04083c1000")
    assert is_chunked(chunked)
    assert batch_position(chunked) == BatchPosition((60, 1, -1), -1, 0)  # its last chunk
    assert not is_chunked(bytes.fromhex("083c1002"))
    assert not is_chunked(bytes.fromhex("088d04100020013003"))  # of a batch
    assert not is_chunked(bytes(MessageId(1, 2).to_native().serialize()))
    with pytest.raises(ValueError, match="not a serialized message id"):
        is_chunked(b"\x08")
