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
    # Messages each Pulsar consumer prefetches per topic; AMQP's prefetch is enforced above.
    receiver_queue_size: int = 100
    # How often subscriptions left behind by an unbind are checked for being drained.
    drain_check_interval: float = 5.0
