"""Message TTL on Pulsar: expired messages are never delivered (rules: model/ttl.py).

A message enters a queue when Pulsar stores it on one of the queue's topics: its publish
timestamp (set by the gateway that wrote it). A requeued copy of a batched message
(delivery.py) carries the original's in ``amqp-enqueued``, so requeueing keeps the expiry, as
RabbitMQ does; a message requeued by Pulsar's negative acknowledgement is the original.

Checked as each message arrives from Pulsar, before it becomes a delivery: an expired one is
dead-lettered (reason ``expired``) when the queue has a dead-letter exchange, and acknowledged
once the letter is stored (dead_letter_publishing.py), or simply acknowledged. Expired messages that
no consumer reads are removed by the leader's sweep (leader/message_ttl_sweep.py), so queue counts
stop counting them within a bounded time (docs/compatibility.md, "Message TTL").
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

import trio

from gateway.backend.interface import Message
from gateway.backend.pulsar.messages import ENQUEUED
from gateway.model.dead_letter import Reason
from gateway.model.ttl import ZERO_TTL_GRACE_MS, effective_ttl, is_expired
from gateway.pulsar.consumer import TrioConsumer
from gateway.pulsar.errors import ClosedError, PulsarClientError
from gateway.pulsar.received import ReceivedMessage

log = logging.getLogger("gateway.pulsar.expiry")

# Sends a message leaving a queue to the queue's dead-letter exchange, if it has one; returns
# once stored (dead_letter_publishing.py).
DeadLetter = Callable[[str, Message, Reason], Awaitable[None]]
Spawn = Callable[[Callable[[], Awaitable[None]]], None]


def enqueued_at(received: ReceivedMessage, properties: Mapping[str, str]) -> int:
    """When the message entered the queue, in milliseconds since the epoch."""
    carried = properties.get(ENQUEUED)
    if carried is not None and carried.isdigit():
        return int(carried)
    return received.publish_timestamp


def now_ms() -> int:
    return int(time.time() * 1000)


class QueueExpiry:
    """One queue's expiry check on the delivery path."""

    __slots__ = ("_dead_letter", "_idle", "_pending", "_spawn", "queue", "ttl")

    def __init__(self, queue: str, ttl: int | None, dead_letter: DeadLetter, spawn: Spawn) -> None:
        self.queue = queue
        self.ttl = ttl  # the queue's x-message-ttl
        self._dead_letter = dead_letter
        self._spawn = spawn
        # Expired messages being dead-lettered: their consumer stays open until they are
        # acknowledged (closing it first would have Pulsar deliver them again).
        self._pending = 0
        self._idle = trio.Event()
        self._idle.set()

    async def idle(self) -> None:
        """Until every expired message handed to ``drop`` is acknowledged (or given back)."""
        await self._idle.wait()

    def expired(self, received: ReceivedMessage, properties: Mapping[str, str]) -> bool:
        expiration = properties.get("expiration")
        if self.ttl is None and expiration is None:
            return False  # the common case, decided with one dict lookup
        ttl = effective_ttl(self.ttl, expiration)
        return is_expired(enqueued_at(received, properties), ttl, now_ms())

    def deadline(self, received: ReceivedMessage, properties: Mapping[str, str]) -> int | None:
        """When the message expires (ms since the epoch), if it does."""
        ttl = effective_ttl(self.ttl, properties.get("expiration"))
        if ttl is None:
            return None
        return enqueued_at(received, properties) + max(ttl, ZERO_TTL_GRACE_MS if ttl == 0 else 0)

    def drop(self, consumer: TrioConsumer, received: ReceivedMessage, message: Message) -> None:
        """Dead-letter (if the queue says so) and acknowledge an expired message, in the
        background: the delivery path goes on to the next message meanwhile."""

        async def expire() -> None:
            try:
                await self._dead_letter(self.queue, message, "expired")
            except Exception as error:
                log.warning(
                    "dead-lettering an expired message of '%s' failed (%s); it stays",
                    self.queue,
                    error,
                )
                with contextlib.suppress(ClosedError, PulsarClientError):
                    consumer.negative_acknowledge(received)
            else:
                with contextlib.suppress(ClosedError, PulsarClientError):
                    consumer.acknowledge(received)
            finally:
                self._pending -= 1
                if not self._pending:
                    self._idle.set()

        if not self._pending:
            self._idle = trio.Event()
        self._pending += 1
        self._spawn(expire)
