"""Message ids as plain, ordered, hashable values.

pulsar-client's ``_pulsar.MessageId`` is a C++ object: fine for acks, awkward to store in
ZooKeeper, send to the admin REST API or compare in pure code. :class:`MessageId` is a
``NamedTuple`` so that tuple ordering is Pulsar's ordering within one topic partition
(ledger, then entry, then index inside a batch) and building one per message is cheap.
"""

from __future__ import annotations

from typing import Any, NamedTuple

_MAX_LONG = 2**63 - 1


class MessageId(NamedTuple):
    ledger_id: int
    entry_id: int
    batch_index: int = -1
    partition: int = -1

    @classmethod
    def from_native(cls, native: Any) -> MessageId:
        """From a ``_pulsar.MessageId`` (what send callbacks and messages carry)."""
        return cls(native.ledger_id(), native.entry_id(), native.batch_index(), native.partition())

    def to_native(self) -> Any:
        """A ``_pulsar.MessageId`` (for seek or reader start positions)."""
        import _pulsar  # the C extension; imported here so this module stays pure

        return _pulsar.MessageId(self.partition, self.ledger_id, self.entry_id, self.batch_index)

    def to_rest(self) -> dict[str, int]:
        """The JSON body Pulsar's REST API takes for a position (``ResetCursorData``)."""
        return {
            "ledgerId": self.ledger_id,
            "entryId": self.entry_id,
            "partitionIndex": self.partition,
            "batchIndex": self.batch_index,
        }

    @classmethod
    def from_rest(cls, data: dict[str, Any]) -> MessageId:
        """From the JSON Pulsar's REST API returns (e.g. ``lastMessageId``)."""
        return cls(
            int(data["ledgerId"]),
            int(data["entryId"]),
            int(data.get("batchIndex", -1)),
            int(data.get("partitionIndex", -1)),
        )

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.batch_index}:{self.partition}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        """Inverse of ``str()``: ``"ledger:entry:batch:partition"`` (e.g. from a znode)."""
        parts = text.split(":")
        if len(parts) != 4:
            raise ValueError(f"not a message id (ledger:entry:batch:partition): {text!r}")
        ledger, entry, batch, partition = (int(p) for p in parts)
        return cls(ledger, entry, batch, partition)


class BatchPosition(NamedTuple):
    """Where a message lies in its Pulsar entry: the entry (ledger, entry id, partition), its
    index in the entry's batch and the batch's size (-1 and 0 for a message of its own)."""

    entry: tuple[int, int, int]
    batch_index: int
    batch_size: int


def batch_position(serialized: bytes) -> BatchPosition:
    """Read pulsar-client's serialized message id (``MessageId.serialize()``, a protobuf
    ``MessageIdData``: ledgerId 1, entryId 2, partition 3, batch_index 4, ack_set 5,
    batch_size 6, first_chunk_message_id 7; PulsarApi.proto). The batch size is in no
    accessor of the Python binding, only there."""
    fields = {3: -1, 4: -1, 6: 0}
    position, end = 0, len(serialized)
    while position < end:
        tag, position = _varint(serialized, position)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, position = _varint(serialized, position)
            # int32 and int64 fields hold negative numbers as 64-bit two's complement.
            fields[number] = value - (1 << 64) if value >= 1 << 63 else value
        elif wire_type == 2:
            length, position = _varint(serialized, position)
            position += length
        elif wire_type in (1, 5):
            position += 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"not a serialized message id: wire type {wire_type}")
    if position != end or 1 not in fields or 2 not in fields:
        raise ValueError("not a serialized message id")
    return BatchPosition((fields[1], fields[2], fields[3]), fields[4], fields[6])


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("not a serialized message id: a varint runs off")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


# The same sentinels as pulsar-client's MessageId.earliest / MessageId.latest.
EARLIEST = MessageId(-1, -1, -1, -1)
LATEST = MessageId(_MAX_LONG, _MAX_LONG, -1, -1)
