"""The leader's care of the fleet's delivery records (delivery_records.py): a replica's record
outlives it, since the others need it when it is gone, but not forever.

A record is needed until every message in it came back to a consumer (which then records it
in its own) or was settled. The gateway cannot see that cheaply, so it keeps a gone replica's
record for ``RECORD_RETENTION``: a queue left without consumers longer than that gives its
messages back unmarked. A replica is there while it stands for leader of the namespace.
"""

from __future__ import annotations

import logging
from typing import Final, Protocol

import trio

from gateway.backend.pulsar.leader.cleaner import repeat_rounds
from gateway.backend.pulsar.leader.scope import LeaderDuty, LeaderScope
from gateway.metadata.roles import Deliveries, Leadership

log = logging.getLogger("gateway.leader")

__all__ = ["DeliveryRecordPruner"]

# The leader removes the record of a replica gone (no candidate of the namespace) this long.
RECORD_RETENTION: Final = 24 * 3600.0
PRUNE_INTERVAL: Final = 60.0


class PrunerStore(Deliveries, Leadership, Protocol):
    """What the pruner uses of the metadata store: the delivery records, and the replicas
    standing for leader (those that are there)."""


class DeliveryRecordPruner(LeaderDuty):
    """Removes the records of replicas gone for ``retention`` seconds."""

    def __init__(self, scope: LeaderScope, *, retention: float = RECORD_RETENTION) -> None:
        super().__init__(scope)
        self._store: PrunerStore = scope.store
        self._retention = retention
        # Replica -> when it was first seen gone.
        self._gone: dict[str, float] = {}

    async def run(self, interval: float = PRUNE_INTERVAL) -> None:
        await repeat_rounds("delivery record pruner", self._namespace, self.prune, interval)

    async def prune(self) -> None:
        store, namespace = self._store, self._namespace
        recorders = await store.delivery_recorders(namespace)
        gone = recorders - await store.live_replicas(namespace)
        now = trio.current_time()
        self._gone = {replica: self._gone.get(replica, now) for replica in gone}
        for replica, since in list(self._gone.items()):
            if now - since >= self._retention:
                await store.drop_deliveries(namespace, replica)
                del self._gone[replica]
                log.info(
                    "leader: removed the delivery record of %s in %s (gone for %.0f s)",
                    replica,
                    namespace,
                    now - since,
                )
