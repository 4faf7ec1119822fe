"""Which messages this replica has handed out and not seen settled: AMQP's ``redelivered``.

Pulsar counts a redelivery only when a consumer negatively acknowledges a message and the
broker resends it, and pulsar-client sends negative acknowledgements after a delay: a consumer
that requeues its messages and closes at once (channel or connection closed, consumer
cancelled) gets them redelivered uncounted, and so does a consumer whose broker connection
was re-established (the broker sends everything unacknowledged again). RabbitMQ marks every
message that was delivered before as redelivered, so the gateway remembers what it delivered
until it is acknowledged.

Messages are known by their queue, topic and serialized message id: one call into
pulsar-client (a ``MessageId`` read field by field costs four). The queue is part of the key
because one message of a topic reaches every queue bound to it (a subscription each), and each
queue's copy is delivered and settled on its own: acknowledging it in one queue must not make
the other's redelivery look new, nor the other's first delivery look like a redelivery.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from gateway.pulsar.consumer import ReceivedMessage

# The set is bounded: a message delivered here and settled on another replica would otherwise
# stay forever. The oldest are forgotten first (their redelivery then goes unmarked).
MAX_TRACKED: Final = 100_000

Key = tuple[str, str, bytes]


def key_of(queue: str, received: ReceivedMessage) -> Key:
    return (queue, received.topic, received.id_bytes)


class Redeliveries:
    def __init__(self, limit: int = MAX_TRACKED) -> None:
        self._outstanding: OrderedDict[Key, None] = OrderedDict()
        self._limit = limit

    def __len__(self) -> int:
        return len(self._outstanding)

    def delivered(self, queue: str, received: ReceivedMessage) -> tuple[Key, bool]:
        """Record a delivery from ``queue``: its key (for ``settled``), and whether the message
        had been delivered from that queue before."""
        key = key_of(queue, received)
        before = key in self._outstanding or received.redelivery_count > 0
        self._outstanding[key] = None
        self._outstanding.move_to_end(key)
        while len(self._outstanding) > self._limit:
            self._outstanding.popitem(last=False)
        return key, before

    def seen(self, queue: str, received: ReceivedMessage) -> bool:
        """Whether the message was delivered from ``queue`` before (recording nothing)."""
        return key_of(queue, received) in self._outstanding or received.redelivery_count > 0

    def settled(self, key: Key) -> None:
        """Acknowledged (or dropped): it will not come back."""
        self._outstanding.pop(key, None)
