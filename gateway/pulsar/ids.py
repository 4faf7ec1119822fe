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


# The same sentinels as pulsar-client's MessageId.earliest / MessageId.latest.
EARLIEST = MessageId(-1, -1, -1, -1)
LATEST = MessageId(_MAX_LONG, _MAX_LONG, -1, -1)
