"""The one place that picks a queue's consumer strategy from its arguments."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gateway.amqp.fieldtable import Field
from gateway.backend.interface import QueueSubscription
from gateway.backend.pulsar.consumers.interface import ConsumerHost, ConsumerStrategy
from gateway.backend.pulsar.consumers.single_active import SINGLE_ACTIVE
from gateway.backend.pulsar.queue_types.interface import ConsumeRequest
from gateway.model.consumers import single_active
from gateway.model.entities import Queue

__all__ = ["COMPETING", "CompetingConsumers", "strategy_of"]


class CompetingConsumers:
    """Consumers that share the queue's messages as Pulsar dispatches them (``x-priority``:
    Pulsar's consumer priority level; a priority queue's reads ordered by priority_reads.py)."""

    async def consume(
        self, host: ConsumerHost, entity: Queue, request: ConsumeRequest
    ) -> QueueSubscription:
        return await host.consume_competing(entity, request)


COMPETING: Final = CompetingConsumers()


def strategy_of(arguments: Mapping[str, Field]) -> ConsumerStrategy:
    """The consumer strategy of a queue declared with ``arguments``."""
    return SINGLE_ACTIVE if single_active(arguments) else COMPETING
