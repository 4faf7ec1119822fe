"""Positions in a Pulsar topic partition, as the rollup's Spark offsets carry them.

A Spark offset of the Pulsar source is ``{partition topic: position}``, where a position is a
serialized pulsar-client ``MessageId`` (base64, so that it fits in the JSON Spark checkpoints).
A batch is the half-open range ``(start, end]`` of each partition: start is the last message of
the previous batch (or the earliest position), end the last message of this one. Both ends are
fixed in the checkpoint's offset log *before* the batch runs, so a replayed batch reads exactly
the same messages.

Ordering. pulsar-client orders ids by (ledger, entry, batch index), where batch index -1 means
"not inside a batch". The broker's last-message id names an *entry* (batch index -1) even when
that entry is a batch of several messages; read as a plain id, it would sort *before* the
messages inside its own entry. So a position whose batch index is -1 stands for the whole entry:
:func:`sort_key` gives it the largest batch index. Then "every message up to the last entry"
and "everything after the last entry" both mean what they say, batched or not.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import _pulsar

__all__ = ["EARLIEST", "InvalidPosition", "decode", "describe", "encode", "sort_key"]

# Larger than any batch index (a batch holds at most a few thousand messages).
_WHOLE_ENTRY: Final = 1 << 62

SortKey = tuple[int, int, int]


class InvalidPosition(ValueError):
    """A checkpointed position that is not a serialized MessageId."""


def encode(message_id: Any) -> str:
    """The offset form of a ``_pulsar.MessageId`` (or ``pulsar.MessageId``)."""
    native = getattr(message_id, "_msg_id", message_id)
    return base64.b64encode(native.serialize()).decode("ascii")


def decode(position: str) -> Any:
    """The ``_pulsar.MessageId`` of an offset position."""
    try:
        raw = base64.b64decode(position.encode("ascii"), validate=True)
        return _pulsar.MessageId.deserialize(raw)
    except (binascii.Error, UnicodeEncodeError, ValueError, RuntimeError) as error:
        raise InvalidPosition(f"not a serialized message id: {position!r} ({error})") from None


#: Before the first message of any partition: a new query with startingOffsets=earliest.
EARLIEST: Final = encode(_pulsar.MessageId.earliest)


def sort_key(message_id: Any) -> SortKey:
    """Total order of positions and message ids; batch index -1 covers its whole entry."""
    native = getattr(message_id, "_msg_id", message_id)
    batch = native.batch_index()
    return (native.ledger_id(), native.entry_id(), batch if batch >= 0 else _WHOLE_ENTRY)


def describe(message_id: Any) -> str:
    """``ledger:entry:batch`` (what Pulsar's tools print) for log lines."""
    native = getattr(message_id, "_msg_id", message_id)
    return f"{native.ledger_id()}:{native.entry_id()}:{native.batch_index()}"
