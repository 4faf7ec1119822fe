"""The leader's sweep of expired messages (expiry.py checks them on delivery; this removes
those no consumer reads, so queue counts stop counting them within a bounded time).

Every ``interval`` seconds, for each queue of the namespace with an ``x-message-ttl``:

- without a dead-letter exchange: Pulsar's own per-subscription expiry (``expireMessages``:
  the cursor skips every message published more than N seconds ago) on each of the queue's
  topics, with N the TTL rounded *up* to whole seconds, so no message goes before its time;
- with one, and while no consumer reads the queue on any replica (consumers do it on
  delivery): a consumer of the queue reads from the head; expired messages are dead-lettered
  and acknowledged as on delivery, and the first one that is not expired ends the round (it
  and the rest go back untouched when the consumer closes, not marked redelivered).

So a message expired under the queue's TTL leaves the counts at most TTL (rounded up to a
second) + ``interval`` + one round's work after it entered the queue. Messages that expire only
by their own ``expiration`` property are dropped when they reach a consumer (RabbitMQ's
classic queues also count those until they reach the head of the queue).
"""

from __future__ import annotations

import logging
import math

import trio

from gateway.backend.pulsar.cleaner import repeat_rounds
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.metadata.store import MetadataStore
from gateway.model.dead_letter import dead_letter_target
from gateway.model.naming import subscription_for
from gateway.model.ttl import queue_message_ttl
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.errors import NotFound

log = logging.getLogger("gateway.pulsar.ttl_sweep")

SWEEP_INTERVAL = 1.0
# Per queue and round: how long a sweep may read, and wait for the next message.
SWEEP_BUDGET = 5.0
SWEEP_WAIT = 0.5
SWEEP_READ_AHEAD = 100


class ExpirySweeper:
    def __init__(
        self, vhost: PulsarVirtualHost, store: MetadataStore, admin: PulsarAdmin, namespace: str
    ) -> None:
        self._vhost = vhost
        self._store = store
        self._admin = admin
        self._namespace = namespace

    async def run(self, interval: float = SWEEP_INTERVAL) -> None:
        await repeat_rounds("expiry", self._namespace, self.sweep, interval)

    async def sweep(self) -> None:
        view = self._store.view(self._namespace)
        for queue in sorted(view.queues.values(), key=lambda q: q.name):
            ttl = queue_message_ttl(queue.arguments)
            if ttl is None:
                continue
            if dead_letter_target(queue.arguments) is None:
                await self._expire(queue.name, ttl)
            elif not view.consumers.get(queue.name):
                with trio.move_on_after(SWEEP_BUDGET):
                    await self._dead_letter_expired(queue.name)

    async def _expire(self, queue: str, ttl: int) -> None:
        seconds = max(1, math.ceil(ttl / 1000))
        for topic in sorted(self._vhost.bound_topics(self._store.view(self._namespace), queue)):
            try:
                await self._admin.expire_messages(topic, subscription_for(queue), seconds)
            except NotFound:
                continue  # a topic nothing was written to yet
            except Exception as error:
                log.debug("expiring messages of '%s' on %s: %s", queue, topic, error)

    async def _dead_letter_expired(self, queue: str) -> None:
        subscription = await self._vhost.sweeper(queue, SWEEP_READ_AHEAD)
        try:
            while True:
                delivery = None
                with trio.move_on_after(SWEEP_WAIT):
                    # Expired messages never come out of receive: they are dead-lettered
                    # and acknowledged on the way (expiry.py).
                    delivery = await subscription.receive()
                if delivery is not None:
                    delivery.unread()  # younger than the TTL, as is all behind it
                return
        finally:
            with trio.CancelScope(shield=True):
                await subscription.close()  # after the expired ones are acknowledged
