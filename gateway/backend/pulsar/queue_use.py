"""Records of queue use for queue expiry (``x-expires``; the leader's side:
leader/unused_queue_expiry.py).

A redeclare, a Basic.Get or a Basic.Consume on any replica writes the time into a property
(``amqp-used``) of the queue's own Pulsar subscription (the default exchange's topic), at most
every quarter of the queue's expiry per replica, where the namespace's leader reads it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import trio

from gateway.amqp.fieldtable import Field
from gateway.model.entities import DEFAULT_EXCHANGE
from gateway.model.naming import subscription_for, topic_for
from gateway.model.ttl import queue_expires
from gateway.model.vhost import Namespace
from gateway.pulsar.admin import PulsarAdmin

log = logging.getLogger("gateway.pulsar.queue_use")

__all__ = ["LAST_USED", "QueueUse", "now_ms"]

LAST_USED = "amqp-used"


def now_ms() -> int:
    return int(time.time() * 1000)


class QueueUse:
    """A replica's records of queue use, for the leader's ``QueueExpirer``."""

    def __init__(self, namespace: Namespace, admin: PulsarAdmin) -> None:
        self._namespace = namespace
        self._admin = admin
        self._recorded: dict[str, float] = {}  # queue -> when this replica last recorded (trio)

    async def used(self, queue: str, arguments: Mapping[str, Field]) -> None:
        expires = queue_expires(arguments)
        if expires is None:
            return
        now = trio.current_time()
        if now - self._recorded.get(queue, -1e9) < expires / 4000:
            return
        self._recorded[queue] = now
        if len(self._recorded) > 10_000:
            self._recorded.clear()
        topic = topic_for(self._namespace, DEFAULT_EXCHANGE, queue)
        try:
            await self._admin.update_subscription_properties(
                topic, subscription_for(queue), {LAST_USED: str(now_ms())}
            )
        except Exception as error:  # the queue may then expire a little early: say so
            log.warning("recording a use of queue '%s' failed: %s", queue, error)
