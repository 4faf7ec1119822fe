"""Which messages this replica gave back unacknowledged: AMQP's ``redelivered``.

Pulsar counts a redelivery only when a consumer negatively acknowledges a message and the
broker resends it, and pulsar-client sends negative acknowledgements after a delay: a consumer
that requeues its messages and closes at once (channel or connection closed, consumer
cancelled) gets them redelivered uncounted. RabbitMQ marks every message that was delivered
before as redelivered, so the gateway remembers the messages it requeued until they come back.

Only requeued messages are remembered, not every delivery: a message id costs five calls into
pulsar-client, and most deliveries are acknowledged and never come back, so the hot path reads
one redelivery count and, while nothing is waiting to come back, nothing else.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from gateway.pulsar.consumer import ReceivedMessage

# The set is bounded: a message requeued here and delivered by another replica would otherwise
# stay forever. The oldest are forgotten first (their redelivery then goes unmarked).
MAX_TRACKED: Final = 100_000

Key = tuple[str, int, int, int]


def key_of(received: ReceivedMessage) -> Key:
    message_id = received.message_id
    return (received.topic, message_id.ledger_id, message_id.entry_id, message_id.batch_index)


class Redeliveries:
    def __init__(self, limit: int = MAX_TRACKED) -> None:
        self._requeued: OrderedDict[Key, None] = OrderedDict()
        self._limit = limit

    def __len__(self) -> int:
        return len(self._requeued)

    def delivered(self, received: ReceivedMessage) -> bool:
        """The message is being delivered: whether it had been delivered before (Pulsar
        counted a redelivery, or this replica gave it back). It is forgotten here: should it
        be given back again, ``requeued`` records it again."""
        counted = received.redelivery_count > 0
        if not self._requeued:
            return counted
        key = key_of(received)
        if key in self._requeued:  # (also when counted: a nacked message was requeued too)
            del self._requeued[key]
            return True
        return counted

    def seen(self, received: ReceivedMessage) -> bool:
        """Whether the message was delivered before (without forgetting it)."""
        if received.redelivery_count > 0:
            return True
        return bool(self._requeued) and key_of(received) in self._requeued

    def requeued(self, received: ReceivedMessage) -> None:
        """Delivered and given back unacknowledged: it comes back marked redelivered."""
        key = key_of(received)
        self._requeued[key] = None
        self._requeued.move_to_end(key)
        while len(self._requeued) > self._limit:
            self._requeued.popitem(last=False)

    def forget(self, received: ReceivedMessage) -> None:
        """Done with the message without delivering it (filtered out)."""
        if self._requeued:
            self._requeued.pop(key_of(received), None)
