"""A stream's offsets: Pulsar message ids of its topic as 64-bit integers, in the same order.

RabbitMQ numbers a stream's messages 0, 1, 2, … and applications keep the ``x-stream-offset``
of the last message they handled to resume at ``offset + 1``. Pulsar identifies a message of
a topic by (ledger id, entry id, batch index): ledgers are created with increasing ids, entries
of a ledger count from 0, and a batch holds several messages in one entry. Packing the three
into one long keeps their order, so a resumed consumer gets exactly the messages after the one
it saw:

    offset = ledger << 31 | entry << 11 | batch index      (63 bits, never negative)

The offsets are not dense (they jump at each new ledger and entry) and are only meaningful for
the one stream. Limits: ledger ids below 2**32, at most 2**20 (1,048,576) entries per ledger
(Pulsar rolls a ledger over at 50,000 by default, ``managedLedgerMaxEntriesPerLedger``) and
2**11 (2,048) messages per batch (pulsar-client batches at most 1,000 by default). A message
beyond them gets the largest offset its ledger (or entry) can have: still increasing across
ledgers, equal within the overflow.

Pulsar's broker entry index (``AppendIndexMetadataInterceptor``) would give dense offsets, but
it is off by default, and pulsar-client for Python does not expose it.
"""

from __future__ import annotations

from typing import Final

from gateway.pulsar.ids import MessageId

__all__ = ["LEDGER_BITS", "entry_start", "exact_offset", "message_id_of", "offset_of"]

BATCH_BITS: Final = 11
ENTRY_BITS: Final = 20
LEDGER_BITS: Final = 32
_BATCH_MAX: Final = (1 << BATCH_BITS) - 1
_ENTRY_MAX: Final = (1 << ENTRY_BITS) - 1
_LEDGER_MAX: Final = (1 << LEDGER_BITS) - 1


def offset_of(message_id: MessageId) -> int:
    """The offset of the message with ``message_id`` (order-preserving within a topic)."""
    ledger = min(max(message_id.ledger_id, 0), _LEDGER_MAX)
    entry = min(max(message_id.entry_id, 0), _ENTRY_MAX)
    batch = min(max(message_id.batch_index, 0), _BATCH_MAX)
    if message_id.entry_id > _ENTRY_MAX:
        batch = _BATCH_MAX  # past the limit: the ledger's largest offset
    return (ledger << (ENTRY_BITS + BATCH_BITS)) | (entry << BATCH_BITS) | batch


def exact_offset(message_id: MessageId) -> int | None:
    """``offset_of(message_id)`` when the id is within the limits above, else None: an offset
    that other messages share (past a limit) cannot stand for this one alone, and the leader's
    feed names each copy it appends by its original's offset (copies.py)."""
    if (
        0 <= message_id.ledger_id <= _LEDGER_MAX
        and 0 <= message_id.entry_id <= _ENTRY_MAX
        and message_id.batch_index <= _BATCH_MAX
    ):
        return offset_of(message_id)
    return None


def message_id_of(offset: int) -> MessageId:
    """The message id an offset stands for (its batch index -1 when it is 0: a message of
    its own entry, or the first of a batch)."""
    ledger = offset >> (ENTRY_BITS + BATCH_BITS)
    entry = (offset >> BATCH_BITS) & _ENTRY_MAX
    batch = offset & _BATCH_MAX
    return MessageId(ledger, entry, batch if batch else -1)


def entry_start(offset: int) -> MessageId:
    """Where a reader starts (inclusive) to find the first message at ``offset`` or after: the
    entry holding it (a batch is read whole, its earlier messages skipped by offset)."""
    found = message_id_of(offset)
    return MessageId(found.ledger_id, found.entry_id)
