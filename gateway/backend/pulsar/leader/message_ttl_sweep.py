"""The leader's sweep of expired messages (message_ttl.py checks them on delivery; this removes
those no consumer reads, so queue counts stop counting them within a bounded time).

Every ``interval`` seconds:

- for each queue with an ``x-message-ttl`` and no dead-letter exchange: Pulsar's own
  per-subscription expiry (``expireMessages``: the cursor skips every message published more
  than N seconds ago) on each of the queue's topics, with N the TTL rounded *up* to whole
  seconds, so no message goes before its time;
- for each queue with a dead-letter exchange (TTL or not: its messages may carry their own
  ``expiration``), while no consumer reads it on any replica (consumers do it on delivery): a
  consumer of the queue reads from the head; expired messages are dead-lettered and
  acknowledged as on delivery, and the first one that is not expired ends the round (it and
  the rest go back untouched when the consumer closes, not marked redelivered). The next
  round for that queue is when that head message expires (or ``HEAD_RECHECK`` later if it
  never does), as RabbitMQ's classic queues expire from the head on a timer.

So a message expired under the queue's TTL leaves the counts at most TTL (rounded up to a
second) + ``interval`` + one round's work after it entered the queue. In a queue without a
dead-letter exchange, messages that expire only by their own ``expiration`` are dropped when
they reach a consumer (RabbitMQ's classic queues also count them until they reach the head).
"""

from __future__ import annotations

import logging
import math
import time

import trio

from gateway.backend.pulsar.leader.cleaner import repeat_rounds
from gateway.backend.pulsar.leader.scope import LeaderDuty, LeaderScope
from gateway.metadata.chunked import Picked
from gateway.metadata.roles import Views
from gateway.model.dead_letter import dead_letter_target
from gateway.model.entities import Queue
from gateway.model.naming import subscription_for
from gateway.model.ttl import queue_message_ttl
from gateway.pulsar.errors import NotFound

log = logging.getLogger("gateway.pulsar.ttl_sweep")

SWEEP_INTERVAL = 1.0
# Per queue and round: how long a sweep may read, and wait for the next message.
SWEEP_BUDGET = 5.0
SWEEP_WAIT = 0.5
SWEEP_READ_AHEAD = 20
# How often the head of a dead-lettering queue without a TTL at its head is looked at again.
HEAD_RECHECK = 5.0


def _swept(queue: Queue) -> Queue | None:
    """The queue if a sweep has anything to do with it (a TTL, or a dead-letter exchange)."""
    arguments = queue.arguments
    if queue_message_ttl(arguments) is None and dead_letter_target(arguments) is None:
        return None
    return queue


class ExpirySweeper(LeaderDuty):
    def __init__(self, scope: LeaderScope) -> None:
        super().__init__(scope)
        self._store: Views = scope.store  # reads the view only
        # Per queue with a dead-letter exchange: when its head is next worth reading (the
        # head's expiry, or a while later if it has none: only a consumer moves the head).
        self._due: dict[str, float] = {}
        # The queues with a message TTL or a dead-letter exchange: the others have nothing to
        # sweep (looked for only where the queues changed).
        self._swept: Picked[str, Queue, Queue] = Picked(_swept)

    async def run(self, interval: float = SWEEP_INTERVAL) -> None:
        await repeat_rounds("expiry", self._namespace, self.sweep, interval)

    async def sweep(self) -> None:
        view = self._store.view(self._namespace)
        now = trio.current_time()
        self._due = {q: due for q, due in self._due.items() if q in view.queues}
        for queue in sorted(self._swept(view.queues).values(), key=lambda q: q.name):
            ttl = queue_message_ttl(queue.arguments)
            if dead_letter_target(queue.arguments) is None:
                if ttl is not None:
                    await self._expire(queue.name, ttl)
            elif not view.consumers.get(queue.name) and now >= self._due.get(queue.name, 0.0):
                try:
                    with trio.move_on_after(SWEEP_BUDGET):
                        self._due[queue.name] = await self._dead_letter_expired(queue.name)
                except Exception as error:  # one queue's trouble does not hold up the others
                    log.info("sweeping queue '%s' failed: %s", queue.name, error)
                    self._due[queue.name] = now + HEAD_RECHECK

    async def _expire(self, queue: str, ttl: int) -> None:
        seconds = max(1, math.ceil(ttl / 1000))
        for topic in sorted(self._vhost.bound_topics(self._store.view(self._namespace), queue)):
            try:
                await self._admin.expire_messages(topic, subscription_for(queue), seconds)
            except NotFound:
                continue  # a topic nothing was written to yet
            except Exception as error:
                log.debug("expiring messages of '%s' on %s: %s", queue, topic, error)

    async def _dead_letter_expired(self, queue: str) -> float:
        """Dead-letter the expired messages at the queue's head; returns when (trio time)
        the head is next worth reading."""
        subscription = await self._vhost.sweeper(queue, SWEEP_READ_AHEAD)
        try:
            delivery = None
            with trio.move_on_after(SWEEP_WAIT):
                # Expired messages never come out of receive: they are dead-lettered and
                # acknowledged on the way (message_ttl.py).
                delivery = await subscription.receive()
            if delivery is None:
                return trio.current_time()  # empty (for now): look again next round
            # Not expired: it stays the head (RabbitMQ's classic queues also expire only
            # from the head), so nothing is due before it expires.
            expires = delivery.expires_at()
            delivery.unread()
            if expires is None:
                return trio.current_time() + HEAD_RECHECK
            return trio.current_time() + max(0.0, expires / 1000 - time.time())
        finally:
            with trio.CancelScope(shield=True):
                await subscription.close()  # after the expired ones are acknowledged
