"""Batches read ahead behind a client at its prefetch limit, moved on to other consumers.

Pulsar dispatches an entry whole to one consumer, and a producer batch is one entry: a consumer
whose client may hold only ``prefetch`` unacknowledged deliveries can have read ahead far more
than that of a batch. Those messages would wait for that client however long it takes, while
the queue's other consumers get nothing of them (RabbitMQ's work-queue pattern: prefetch 1,
slow jobs, jobs published in bursts). RabbitMQ gives them to the other consumers.

So when a consumer's client has been at its prefetch limit for ``HELD_BACK_AFTER`` while its
Pulsar consumer holds messages of batches, and the queue has another consumer (on any
replica), those messages are moved: a copy of each to the queue's own topic, then the original
acknowledged, as a requeue of a batched message is (delivery.py). The copies are written one
at a time, each an entry of its own, so that no batch forms again. They lose their place in
line, as a requeue does; a queue with one consumer is left alone, its messages in order.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from gateway.pulsar.consumer import TrioConsumer
from gateway.pulsar.received import ReceivedMessage

log = logging.getLogger("gateway.pulsar.delivery")

# How long a client must have been at its prefetch limit before what its consumer read ahead
# of batches is moved: a consumer that keeps up acknowledges well within it.
HELD_BACK_AFTER = 0.2
# How long the rest of a batch may take to come out of pulsar-client's receiver queue, where
# it arrived whole (a listener round: milliseconds).
TAIL_WAIT = 1.0


class Holder(Protocol):
    """The subscription (delivery.py ``PulsarQueueSubscription``) whose read-ahead is watched."""

    queue: str
    outstanding: int
    consumer: TrioConsumer

    @property
    def consuming(self) -> bool:
        """Still one of the queue's consumers: not closed, left or retired."""

    def two_step(self) -> contextlib.AbstractContextManager[None]: ...

    async def move_to_queue_topic(self, received: ReceivedMessage) -> None: ...


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
                    await self._move_on(holder)
        finally:
            self._watching = False

    def _at_limit(self, holder: Holder) -> bool:
        return holder.consuming and holder.outstanding >= self.prefetch

    async def _move_on(self, holder: Holder) -> None:
        # A close waits for it (``two_step``): a Pulsar consumer closed between a copy and the
        # original's acknowledgement would give the original back beside its copy.
        with holder.two_step():
            taken = await holder.consumer.take_batched_read_ahead(TAIL_WAIT)
            for received in taken:
                await holder.move_to_queue_topic(received)
        if taken:
            log.debug(
                "moved %d messages of batches held back by a client of '%s' at its prefetch "
                "limit (%d)",
                len(taken),
                holder.queue,
                self.prefetch,
            )
