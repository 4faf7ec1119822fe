"""Batches read ahead behind a client at its prefetch limit, moved on to other consumers.

Pulsar dispatches an entry whole to one consumer, and a producer batch is one entry: a consumer
whose client may hold only ``prefetch`` unacknowledged deliveries can have read ahead far more
than that of a batch. Those messages would wait for that client however long it takes, while
the queue's other consumers get nothing of them (RabbitMQ's work-queue pattern: prefetch 1,
slow jobs, jobs published in bursts). RabbitMQ gives them to the other consumers.

So when a consumer's client has been at its prefetch limit for ``HELD_BACK_AFTER`` while its
Pulsar consumer holds messages of batches, and the queue has another consumer (on any
replica), those messages are moved: a copy of each to the queue's own topic, then the original
acknowledged, as a requeue of a batched message is (delivery.py ``move_on_batches``). The
copies are written one at a time, each an entry of its own, so that no batch forms again.
They lose their place in line, as a requeue does; a queue with one consumer is left alone, its
messages in order. (A Basic.Get consumer retired while a Get delivery is held, and a consumer
cancelled with deliveries unacknowledged, move their batches on at once:
``PulsarQueueSubscription.retire``.)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from gateway.pulsar.consumer import TrioConsumer

log = logging.getLogger("gateway.pulsar.delivery")

# How long a client must have been at its prefetch limit before what its consumer read ahead
# of batches is moved: a consumer that keeps up acknowledges well within it.
HELD_BACK_AFTER = 0.2


class Holder(Protocol):
    """The subscription (delivery.py ``PulsarQueueSubscription``) whose read-ahead is watched."""

    queue: str
    outstanding: int
    consumer: TrioConsumer

    @property
    def consuming(self) -> bool:
        """Still one of the queue's consumers: not closed, left or retired."""

    async def move_on_batches(self) -> int:
        """Move what was read ahead of batches on to the queue's other consumers; how many."""


class HeldBack:
    """The watch over one subscription whose client takes at most ``prefetch`` deliveries."""

    def __init__(
        self,
        prefetch: int,
        others_consume: Callable[[], bool],
        spawn: Callable[[Callable[[], Awaitable[None]]], None],
    ) -> None:
        """``others_consume``: whether the queue has consumers besides this one, on any
        replica; ``spawn`` starts the watch in the background."""
        self.prefetch = prefetch
        self._others_consume = others_consume
        self._spawn = spawn
        self._watching = False

    def delivery_made(self, holder: Holder) -> None:
        """After each delivery: the watch begins when the client reaches its limit."""
        if holder.outstanding >= self.prefetch and not self._watching:
            self._watching = True

            async def watch() -> None:
                await self._watch(holder)

            self._spawn(watch)

    async def _watch(self, holder: Holder) -> None:
        try:
            while self._at_limit(holder):
                await trio.sleep(HELD_BACK_AFTER)
                if (
                    self._at_limit(holder)
                    and self._others_consume()
                    and holder.consumer.holds_batched()
                ):
                    moved = await holder.move_on_batches()
                    log.debug(
                        "moved %d messages of batches held back by a client of '%s' at its "
                        "prefetch limit (%d)",
                        moved,
                        holder.queue,
                        self.prefetch,
                    )
        finally:
            self._watching = False

    def _at_limit(self, holder: Holder) -> bool:
        return holder.consuming and holder.outstanding >= self.prefetch
