"""The metadata store: where every replica finds the vhosts' exchanges, queues and bindings.

Reads come from a local view that watches keep current, so routing a message costs no
round trip; writes go to the store and are compare-and-set, so two replicas declaring the
same name at once end with one winner that both see. A replica's view always includes its
own completed writes (it never answers from a view older than its last write).

Some records live only as long as the replica that wrote them (its *session*, in ZooKeeper
terms): the owner of an exclusive queue and the consumers of a queue. When a replica dies its
session ends and they go with it; the leader of the namespace (one replica, elected through
the store) then deletes what they kept alive (docs/metadata.md, "Lifetimes").

``MetadataStore`` is the composition of the roles of roles.py (lifecycle, views, entities,
bindings, topic keys, consumers, drains, leadership, deliveries); the values they take and
return are in values.py and are named here too, where every caller has always found them.
"""

from __future__ import annotations

from typing import Protocol

from gateway.metadata.roles import (
    Bindings,
    Consumers,
    Deliveries,
    Drains,
    Entities,
    Leadership,
    Lifecycle,
    TopicKeys,
    Views,
)
from gateway.metadata.values import (
    REMOVE,
    DrainRecord,
    ExchangeEdges,
    MetadataUnavailable,
    PickActive,
    Position,
    QueueCondition,
    VhostView,
)

__all__ = [
    "REMOVE",
    "DrainRecord",
    "ExchangeEdges",
    "MetadataStore",
    "MetadataUnavailable",
    "PickActive",
    "Position",
    "QueueCondition",
    "VhostView",
]


class MetadataStore(
    Lifecycle,
    Views,
    Entities,
    Bindings,
    TopicKeys,
    Consumers,
    Drains,
    Leadership,
    Deliveries,
    Protocol,
):
    """Per-namespace metadata (``namespace`` is ``tenant/ns``: a vhost's Pulsar namespace):
    every role of roles.py, as the gateway's wiring hands it out."""
