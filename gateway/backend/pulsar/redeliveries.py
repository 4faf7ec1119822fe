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

A replica that stops or dies takes this memory with it, and Pulsar redelivers its consumers'
unacknowledged messages to consumers on other replicas uncounted (4.0.8: a removed consumer's
pending messages are replayed without touching the redelivery tracker, and the tracker is
cleared when a subscription's last consumer goes). So the deliveries also carry a
*generation* (a tick of delivery_records.py's writer): what has been outstanding for a whole
generation and is not in this replica's record in the metadata store yet gets written there,
and the other replicas' records are in ``elsewhere``, checked like this replica's own.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection
from itertools import islice
from typing import Final

from gateway.bounded import remember
from gateway.pulsar.received import ReceivedMessage

# The set is bounded: a message delivered here and settled on another replica would otherwise
# stay forever. The oldest are forgotten first (their redelivery then goes unmarked).
MAX_TRACKED: Final = 100_000

# Messages given back undelivered that are remembered (a Basic.Get consumer's read-ahead: a
# few at a time; forgotten all at once past this).
MAX_GIVEN_BACK: Final = 10_000

Key = tuple[str, str, bytes]


def key_of(queue: str, received: ReceivedMessage) -> Key:
    return (queue, received.topic, received.id_bytes)


class Redeliveries:
    def __init__(self, limit: int = MAX_TRACKED) -> None:
        # Key -> the generation it was (last) delivered in. Oldest first, so generations
        # never decrease along the order.
        self._outstanding: OrderedDict[Key, int] = OrderedDict()
        self._limit = limit
        self.generation = 0
        # Deliveries of generations below this are in the fleet record (or were settled).
        self._recorded = 0
        # A delivery in the fleet record was settled since it was written.
        self.shrunk = False
        # What the other replicas delivered and have not seen settled (their records).
        self.elsewhere: Collection[Key] = frozenset()
        # Key -> how many times this replica gave it back undelivered (``given_back``).
        self._given_back: dict[Key, int] = {}

    def __len__(self) -> int:
        return len(self._outstanding)

    def delivered(self, queue: str, received: ReceivedMessage) -> tuple[Key, bool]:
        """Record a delivery from ``queue``: its key (for ``settled``), and whether the message
        had been delivered from that queue before (here, by another replica, or as Pulsar
        counted)."""
        key = key_of(queue, received)
        outstanding = self._outstanding
        elsewhere = self.elsewhere
        before = key in outstanding or (key in elsewhere if elsewhere else False)
        if not before:
            count = received.redelivery_count  # 0 for nearly every first delivery
            before = count > 0 and self._counted(key, count)
        outstanding[key] = self.generation
        outstanding.move_to_end(key)
        while len(outstanding) > self._limit:
            outstanding.popitem(last=False)
        return key, before

    def seen(self, queue: str, received: ReceivedMessage) -> bool:
        """Whether the message was delivered from ``queue`` before (recording nothing)."""
        key = key_of(queue, received)
        return (
            key in self._outstanding
            or key in self.elsewhere
            or self._counted(key, received.redelivery_count, keep=True)
        )

    def _counted(self, key: Key, count: int, *, keep: bool = False) -> bool:
        """Whether Pulsar's redelivery count says the message was delivered before: not
        when it counts only this replica's negative acknowledgements of it undelivered."""
        if count <= 0:
            return False
        given_back = self._given_back
        undelivered = given_back.get(key, 0) if keep else given_back.pop(key, 0)
        return count > undelivered

    def given_back(self, queue: str, received: ReceivedMessage) -> None:
        """``received`` was read ahead and negatively acknowledged without being delivered
        (a retired Basic.Get consumer hands its buffer back so): the redelivery Pulsar will
        count is not one for AMQP."""
        key = key_of(queue, received)
        remember(self._given_back, key, self._given_back.get(key, 0) + 1, MAX_GIVEN_BACK)

    def settled(self, key: Key) -> None:
        """Acknowledged (or dropped): it will not come back."""
        generation = self._outstanding.pop(key, None)
        if generation is not None and generation < self._recorded:
            self.shrunk = True

    # ------------------------------------------------------------------ the fleet record

    def tick(self) -> bool:
        """Start a new generation; whether a delivery of one before the last is outstanding
        and not recorded yet (it has waited a whole generation: the fleet record is due)."""
        self.generation += 1
        aged, recorded = self.generation - 2, self._recorded
        for generation in reversed(self._outstanding.values()):
            if generation < recorded:
                return False
            if generation <= aged:
                return True
        return False

    def unrecorded(self) -> bool:
        """Whether anything outstanding is missing from the fleet record."""
        newest = next(reversed(self._outstanding.values()), None)
        return newest is not None and newest >= self._recorded

    def snapshot(self, limit: int) -> tuple[list[Key], int]:
        """The newest ``limit`` outstanding deliveries, newest first, for the fleet record,
        and the mark to pass to ``recorded`` once it is stored (later deliveries get a new
        generation, so they are not taken as recorded)."""
        self.generation += 1
        return list(islice(reversed(self._outstanding), limit)), self.generation

    def recorded(self, mark: int) -> None:
        """The snapshot of ``mark`` is stored."""
        self._recorded = mark
        self.shrunk = False
