"""What a consumer strategy may use of the vhost (``PulsarVirtualHost``).

A queue read through Shared subscriptions has its consumers in one of two ways: competing
(each takes what Pulsar dispatches to it, highest ``x-priority`` first) or, with
``x-single-active-consumer``, in a fleet-wide line where only the head consumes. The queue's
arguments pick the strategy once (strategy.py); the vhost does not test them.
"""

from __future__ import annotations

from typing import Protocol

import trio

from gateway.backend.catalog import Catalog
from gateway.backend.interface import QueueSubscription
from gateway.backend.pulsar.delivery import PulsarQueueSubscription
from gateway.backend.pulsar.queue_types.interface import ConsumeRequest
from gateway.model.entities import Queue

__all__ = ["ConsumerHost", "ConsumerStrategy"]


class ConsumerHost(Protocol):
    """The vhost as a consumer strategy sees it."""

    @property
    def catalog(self) -> Catalog: ...

    @property
    def nursery(self) -> trio.Nursery:
        """For work that outlives the Basic.Consume (a line's following)."""
        ...

    async def consume_competing(self, entity: Queue, request: ConsumeRequest) -> QueueSubscription:
        """A competing consumer, registered fleet-wide while it runs."""
        ...

    async def open_active_consumer(self, queue: str, prefetch: int) -> PulsarQueueSubscription:
        """The Pulsar consumer of a line's head, while it is the head."""
        ...

    async def line_consumer_gone(self, queue: str, registration: str) -> None:
        """A consumer left the line: unregister it (and auto-delete the queue if it was the
        last consumer)."""
        ...


class ConsumerStrategy(Protocol):
    async def consume(
        self, host: ConsumerHost, entity: Queue, request: ConsumeRequest
    ) -> QueueSubscription:
        """Basic.Consume on a queue read through subscriptions."""
        ...
