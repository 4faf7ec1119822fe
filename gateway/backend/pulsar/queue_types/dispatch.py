"""The one place that reads a queue's type from its arguments (``x-queue-type``)."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.amqp.fieldtable import Field
from gateway.backend.pulsar.queue_types.classic.queue_type import CLASSIC
from gateway.backend.pulsar.queue_types.interface import QueueType
from gateway.backend.pulsar.queue_types.stream.queue_type import STREAM
from gateway.model.arguments import queue_type_named
from gateway.model.entities import Queue

__all__ = ["keeps_log", "type_of", "type_of_queue"]

# A quorum queue is read through Shared subscriptions as a classic queue is: Pulsar replicates
# every topic, so nothing of RabbitMQ's quorum machinery is needed (model/arguments.py).
_TYPES: dict[str, QueueType] = {"classic": CLASSIC, "quorum": CLASSIC, "stream": STREAM}


def type_of(arguments: Mapping[str, Field]) -> QueueType:
    """The queue type of a queue declared with (validated) ``arguments``."""
    return _TYPES.get(queue_type_named(arguments), CLASSIC)


def type_of_queue(queue: Queue | None) -> QueueType:
    """The type of ``queue``; classic for one that is gone (nothing of it is left to read)."""
    return CLASSIC if queue is None else type_of(queue.arguments)


def keeps_log(queue: Queue | None) -> bool:
    """Whether ``queue`` exists and its own topic is its log (``QueueType.keeps_log``)."""
    return type_of_queue(queue).keeps_log
