"""Queue expiry (``x-expires``) on Pulsar, fleet-wide.

RabbitMQ (docs/ttl.md, "Queue TTL"): a queue with ``x-expires`` is deleted once it has been
unused for that many milliseconds: no consumers, not redeclared, no Basic.Get. It guarantees
the deletion after at least that long, not how promptly. Its messages are not dead-lettered.

Here uses are seen on every replica and recorded where the namespace's leader can read them:

- consumers are in the metadata store while they run (every replica's);
- a redeclare, a Basic.Get or a Basic.Consume on any replica writes the time into a property
  (``amqp-used``) of the queue's own Pulsar subscription (the default exchange's topic), at
  most every quarter of the queue's expiry per replica (queue_use.py);
- the leader (``QueueExpirer``) looks every second at each queue with ``x-expires``: a queue
  without consumers, whose last use (the property, consumers it saw, or when this leader first
  saw the queue: a new leader starts the period afresh) is older than its expiry, is deleted,
  on condition that no consumer exists anywhere (checked by the store with the delete).

So a queue goes between its expiry and its expiry + a quarter of it + about a second after its
last use (later if leadership moves); never before.
"""

from __future__ import annotations

import logging

from gateway.backend.pulsar.leader.cleaner import repeat_rounds
from gateway.backend.pulsar.leader.scope import LeaderDuty, LeaderScope
from gateway.backend.pulsar.queue_use import LAST_USED, now_ms
from gateway.metadata.chunked import Picked
from gateway.metadata.errors import ConditionNotMet
from gateway.metadata.store import QueueCondition
from gateway.model.entities import DEFAULT_EXCHANGE, Queue
from gateway.model.naming import subscription_for, topic_for
from gateway.model.ttl import queue_expires
from gateway.pulsar.errors import NotFound

log = logging.getLogger("gateway.pulsar.queue_expiry")

__all__ = ["QueueExpirer"]

EXPIRY_TICK = 1.0


class QueueExpirer(LeaderDuty):
    """The leader's deletion of queues unused for their ``x-expires``."""

    def __init__(self, scope: LeaderScope) -> None:
        super().__init__(scope)
        # Per queue with x-expires: the latest use this leader knows of (ms).
        self._used: dict[str, int] = {}
        # The queues with an expiry, and theirs (looked for only where the queues changed).
        self._expiring: Picked[str, Queue, int] = Picked(lambda q: queue_expires(q.arguments))

    async def run(self, interval: float = EXPIRY_TICK) -> None:
        await repeat_rounds("queue-expiry", self._namespace, self.expire, interval)

    async def expire(self) -> None:
        view = self._vhost.catalog.view
        now = now_ms()
        self._used = {q: used for q, used in self._used.items() if q in view.queues}
        for name, expires in sorted(self._expiring(view.queues).items()):
            used = self._used.setdefault(name, now)  # first seen: a full period from now
            if view.consumers.get(name):
                self._used[name] = now
                continue
            if now - used < expires:
                continue
            recorded = await self._recorded_use(name)
            if recorded is not None and recorded > used:
                self._used[name] = recorded
                if now - recorded < expires:
                    continue
            await self._delete(name)

    async def _recorded_use(self, queue: str) -> int | None:
        topic = topic_for(self._vhost.namespace, DEFAULT_EXCHANGE, queue)
        try:
            properties = await self._admin.subscription_properties(topic, subscription_for(queue))
        except NotFound:
            return None
        raw = properties.get(LAST_USED, "")
        return int(raw) if raw.isdigit() else None

    async def _delete(self, name: str) -> None:
        try:
            deleted = await self._vhost.drop_queue(name, condition=QueueCondition.UNUSED)
        except ConditionNotMet:
            return  # a consumer came meanwhile
        if deleted:
            self._used.pop(name, None)
            log.info(
                "leader: deleted queue '%s' in %s: unused for its x-expires", name, self._namespace
            )
