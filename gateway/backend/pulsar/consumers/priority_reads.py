"""Reading a priority queue on Pulsar: what a reader holds, and how it orders it.

Pulsar has no priorities: it dispatches a subscription's messages in the order they were
stored. A reader of a priority queue (a consumer, the Basic.Get reader, the drop-head
trimmer) therefore reads ahead a window of messages (``amqpPriorityQueueReadAhead``, at least
its prefetch) into a buffer ordered by priority (``TrioConsumer`` with ``priority_of``), and
each delivery takes the highest priority it holds, oldest first within one (model/priority.py).
Before its first delivery a new reader waits until it has read the queue's messages that Pulsar
has not dispatched to other consumers (``broker_ready_count``), up to its window, so that a
backlog is delivered in RabbitMQ's order, not in the order Pulsar sends it
(docs/compatibility.md, "Priority queues").
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from gateway.amqp.fieldtable import Field
from gateway.backend.pulsar.delivery import PulsarQueueSubscription
from gateway.backend.pulsar.queue_count import broker_ready_count
from gateway.backend.pulsar.resources import PulsarResources
from gateway.model.priority import effective_priority, max_priority
from gateway.pulsar.consumer import ConsumerOptions

__all__ = ["priority_options", "priority_reader", "to_read"]

# The readable Pulsar property that carries an AMQP message's priority (messages.py).
PRIORITY_PROPERTY = "priority"


def priority_reader(maximum: int) -> Callable[[Any], int]:
    """The priority of a native Pulsar message in a queue whose highest priority is
    ``maximum``, from its readable ``priority`` property (a message without one, from the
    gateway or a native producer, is priority 0). For ``ConsumerOptions.priority_of``: it runs
    on pulsar-client's listener thread, one property lookup per message."""

    def priority_of(native: Any) -> int:
        value = native.properties().get(PRIORITY_PROPERTY)
        if value is None or not value.isdigit():
            return 0
        return effective_priority(int(value), maximum)

    return priority_of


def priority_options(
    resources: PulsarResources,
    options: ConsumerOptions,
    arguments: Mapping[str, Field],
    *,
    prefetch: int,
) -> ConsumerOptions | None:
    """``options`` for a reader of a queue with these arguments, if it is a priority queue:
    ordered by priority over a window of at least the prefetch; None for any other queue."""
    maximum = max_priority(arguments)
    if maximum is None:
        return None
    window = max(resources.priority_read_ahead, prefetch, options.receiver_queue_size)
    return replace(
        options,
        priority_of=priority_reader(maximum),
        buffer_size=window,
        # to_read counts what Pulsar dispatched to the queue's other consumers, by name.
        consumer_name=f"amqp-priority-{secrets.token_hex(8)}",
    )


def to_read(resources: PulsarResources) -> Callable[[PulsarQueueSubscription], Any]:
    """The ``fill`` of a priority queue's reader: how many messages it can expect to read
    (the queue's messages not dispatched to its other consumers, on any replica)."""

    async def count(subscription: PulsarQueueSubscription) -> int:
        consumer = subscription.consumer
        name = consumer.options.consumer_name or ""
        return await broker_ready_count(resources, consumer.topics, subscription.queue, reader=name)

    return count
