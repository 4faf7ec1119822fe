"""The leader's drop-head trim of queues over their ``x-max-length`` (length_limit.py says
how the fleet counts; one trimmer per namespace, so no message is dropped twice over)."""

from __future__ import annotations

import logging

import trio

from gateway.backend.pulsar.leader.cleaner import repeat_rounds
from gateway.backend.pulsar.leader.scope import LeaderDuty, LeaderScope
from gateway.backend.pulsar.length_limit import limits_picker

log = logging.getLogger("gateway.pulsar.length_trim")

__all__ = ["LengthTrimmer"]

TRIM_INTERVAL = 0.5
# How long a trim waits for the next of the messages it is dropping.
TRIM_WAIT = 1.0


class LengthTrimmer(LeaderDuty):
    """The leader's drop-head trim of one namespace."""

    def __init__(self, scope: LeaderScope) -> None:
        super().__init__(scope)
        self._limits = limits_picker()

    async def run(self, interval: float = TRIM_INTERVAL) -> None:
        await repeat_rounds("length", self._namespace, self.trim, interval)

    async def trim(self) -> None:
        for queue, limit in sorted(self._limits(self._vhost.catalog.view.queues).items()):
            if limit.rejects_publish:
                continue
            try:
                excess = limit.excess(await self._vhost.count_ready(queue))
                if excess:
                    await self._drop_oldest(queue, excess)
            except Exception as error:  # one queue's trouble does not hold up the others
                log.info("trimming queue '%s' in %s failed: %s", queue, self._namespace, error)

    async def _drop_oldest(self, queue: str, count: int) -> None:
        # A priority queue's head is its highest priority (RabbitMQ drops from there): the
        # sweeper orders what it reads (up to its window), and reads the queue first.
        subscription = await self._vhost.sweeper(queue, count, ordered=True)
        try:
            await subscription.filled()
            for _ in range(count):
                delivery = None
                with trio.move_on_after(TRIM_WAIT):
                    delivery = await subscription.receive()
                if delivery is None:
                    return  # consumers took them meanwhile
                await delivery.drop("maxlen")
        finally:
            with trio.CancelScope(shield=True):
                await subscription.close()
