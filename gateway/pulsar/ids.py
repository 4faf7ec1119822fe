"""Message ids as plain, ordered, hashable values.

pulsar-client's ``_pulsar.MessageId`` is a C++ object: fine for acks, awkward to store in
ZooKeeper, send to the admin REST API or compare in pure code. :class:`MessageId` is a
``NamedTuple`` so that tuple ordering is Pulsar's ordering within one topic partition
(ledger, then entry, then index inside a batch) and building one per message is cheap.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gateway.pulsar.protobuf_fields import fields, signed

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
    try:
        found = fields(serialized)
    except ValueError as error:
        raise ValueError(f"not a serialized message id: {error}") from None

    def number(field: int, default: int | None = None) -> int:
        value = found.get(field, default)
        if not isinstance(value, int):
            raise ValueError(f"not a serialized message id: field {field} is not a number")
        return signed(value)

    return BatchPosition((number(1), number(2), number(3, -1)), number(4, -1), number(6, 0))


def unfinished_batch(position: BatchPosition) -> bool:
    """Whether the message at ``position`` is in a batch and not its last message."""
    return 0 <= position.batch_index < position.batch_size - 1


def further(at: BatchPosition, than: BatchPosition) -> bool:
    """Whether ``at`` lies after ``than`` in their topic (entry, then index in the batch)."""
    return (at.entry, at.batch_index) > (than.entry, than.batch_index)


def completes_batch(at: BatchPosition, position: BatchPosition) -> bool:
    """Whether the message at ``at`` is the last of the batch at ``position``, or further along
    their topic (so that the batch's last message came before it, in dispatch order)."""
    if at.entry == position.entry:
        return at.batch_index == position.batch_size - 1
    return at.entry > position.entry


def is_chunked(serialized: bytes) -> bool:
    """Whether pulsar-client's serialized message id is a chunked message's (PIP-37: a message
    above the broker's maxMessageSize, stored as several entries): such an id carries its first
    chunk's id (``first_chunk_message_id``, field 7 of ``MessageIdData``) besides its last's."""
    try:
        return 7 in fields(serialized)
    except ValueError as error:
        raise ValueError(f"not a serialized message id: {error}") from None


# The same sentinels as pulsar-client's MessageId.earliest / MessageId.latest.
EARLIEST = MessageId(-1, -1, -1, -1)
LATEST = MessageId(_MAX_LONG, _MAX_LONG, -1, -1)
