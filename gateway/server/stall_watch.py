"""Connection.Blocked for a publish the backend holds back, at no cost per publish.

While a publish waits (Pulsar's in-flight limit reached, a producer being created), the
connection's reader waits with it, so the client's socket is not read: that is the
back-pressure. Clients that advertise ``connection.blocked`` are also told, after a publish has
been held for ``after`` seconds, and told again when it goes through (RabbitMQ does the same on
its resource alarms).

A cancel scope around every publish measured ~15% of the publish path, so instead each publish
only bumps a counter; a watcher task, running only while publishes keep coming, compares the
counters once per period: a publish that was in progress at the previous look and still is has
been held for at least a whole period.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from gateway.amqp.connection import ServerConnection
from gateway.observability.counters import COUNTERS

REASON = "the message store is not keeping up"


class StallWatch:
    """Counts the publishes of one connection (they run one at a time, in the reader)."""

    def __init__(
        self, after: float, protocol: ServerConnection, flush: Callable[[], Awaitable[None]]
    ) -> None:
        self._after = after
        self._protocol = protocol
        self._flush = flush
        self.started = 0
        self.finished = 0
        self.blocked = False
        # A publish has waited a whole period (starlight_blocked_connections counts these,
        # whether or not the client accepts Connection.Blocked).
        self.stalled = False
        self._watching = False

    def publish_started(self, nursery: trio.Nursery) -> None:
        self.started += 1
        if not self._watching:
            self._watching = True
            nursery.start_soon(self._watch)

    async def publish_finished(self) -> None:
        self.finished += 1
        if self.stalled:
            self.stalled = False
            COUNTERS.blocked_publishes -= 1
        if self.blocked:
            self.blocked = False
            self._protocol.send_unblocked()
            await self._flush()

    async def _watch(self) -> None:
        try:
            last = (self.started, self.finished)
            while True:
                await trio.sleep(self._after)
                now = (self.started, self.finished)
                if now == last:
                    if self.finished == self.started:
                        return  # no publish for a whole period: stop looking until the next
                    if not self.stalled:
                        self.stalled = True
                        COUNTERS.blocked_publishes += 1
                        COUNTERS.blocked_total += 1
                    if not self.blocked and self._protocol.send_blocked(REASON):
                        # Set before flushing, so that a publish finishing meanwhile unblocks.
                        self.blocked = True
                        await self._flush()
                last = now
        finally:
            self._watching = False
