"""A received Pulsar message as the redelivery bookkeeping reads it (entry, redelivery count,
topic, id bytes), without a broker: for the unit tests of backend/pulsar's redeliveries and
delivery records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from gateway.pulsar.received import ReceivedMessage


@dataclass
class FakeReceived:
    """What Redeliveries reads of a ReceivedMessage."""

    entry: int
    redelivery_count: int = 0
    topic: str = "persistent://t/n/q"

    @property
    def id_bytes(self) -> bytes:
        return self.entry.to_bytes(8, "big")


def received(
    entry: int, *, redelivery_count: int = 0, topic: str = "persistent://t/n/q"
) -> ReceivedMessage:
    """Message ``entry`` of ``topic`` (its id bytes are the entry number), received
    ``redelivery_count`` times before."""
    return cast(ReceivedMessage, FakeReceived(entry, redelivery_count, topic))
