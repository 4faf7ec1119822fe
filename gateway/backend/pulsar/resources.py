"""What every vhost of the Pulsar backend shares: the clients, the producers, the store."""

from __future__ import annotations

from dataclasses import dataclass

import trio

from gateway.metadata.store import MetadataStore
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.client import PulsarClient
from gateway.pulsar.producer_cache import ProducerCache


@dataclass(frozen=True)
class PulsarResources:
    client: PulsarClient
    admin: PulsarAdmin
    producers: ProducerCache
    store: MetadataStore
    # For background work that outlives a request (auto-delete, the producer sweeper).
    nursery: trio.Nursery
    # The most messages a Pulsar consumer reads ahead per topic (pulsar-client's default);
    # consumers with an AMQP prefetch read ahead only that many (receiver_queue_for).
    max_receiver_queue: int = 1000

    def receiver_queue_for(self, prefetch: int, topics: int = 1) -> int:
        """Per-topic read-ahead of a consumer whose client takes at most ``prefetch``
        unacknowledged deliveries (0: no limit), reading ``topics`` topics.

        A larger read-ahead takes messages from the queue's other consumers, on this replica
        or another, only to hold them here: a work queue with prefetch 1 must be shared
        fairly, as on RabbitMQ. A smaller one costs throughput (one flow request per half
        queue). The topics of one queue share ``max_receiver_queue`` between them, so that a
        queue bound to many keys does not buffer thousands of messages per consumer.
        """
        wanted = self.max_receiver_queue if prefetch <= 0 else prefetch
        return max(1, min(wanted, self.max_receiver_queue // max(1, topics)))

    # How often subscriptions left behind by an unbind are checked for being drained.
    drain_check_interval: float = 5.0
    # The broker stores acknowledgements per batch index, so consumers send them so
    # (batching.py); never on a broker that does not.
    batch_index_acks: bool = False
    # Subscriptions on per-key topics only once a message is published there (activation.py;
    # ``amqpLazySubscriptions``).
    lazy_subscriptions: bool = True
    # What a consumer of a priority queue reads ahead and orders (at least its prefetch;
    # ``amqpPriorityQueueReadAhead``).
    priority_read_ahead: int = 100
