"""The leader's sweep of the default exchange's keys whose queue is gone.

A publish to the default exchange registers the queue's name as a key (activation.py: the
record that makes the queue's own topic subscribed). Queues come and go all the time (a reply
queue per RPC client, a server-named queue per consumer), so without a sweep every queue that
ever had a message would leave a znode behind, and its subscription if the replica that
deleted the queue did not know the key yet (its view lagged the publisher's registration).

A key is swept once its queue has been missing from the view for a whole round (``interval``,
the cleaner's 5 s): long after every replica's view saw the delete. Then, checked against
ZooKeeper each time: the key is unregistered, and the queue's subscription on its topic is
removed. Every replica forgets its handshake for a key that leaves its view
(``PulsarVirtualHost._forget_unregistered``): its next publish to that name registers the key
again and finds a queue declared since. The window left: a replica whose view lags the
unregistration (milliseconds) publishing to the name of a queue that was deleted over a round
ago and is declared again, elsewhere, in exactly those milliseconds.

Keys of direct and topic exchanges are not swept: they are the routing keys an application
publishes to, as bounded as its code (and go with their exchange).
"""

from __future__ import annotations

import logging
from typing import Protocol

from gateway.backend.pulsar.leader.cleaner import repeat_rounds
from gateway.backend.pulsar.leader.scope import LeaderDuty, LeaderScope
from gateway.metadata.roles import Entities, TopicKeys, Views
from gateway.model.entities import DEFAULT_EXCHANGE
from gateway.observability.counters import COUNTERS

log = logging.getLogger("gateway.pulsar.leader")

# Keys unregistered per round at most: a burst of deleted reply queues is swept over a few
# rounds rather than in one long one that holds up nothing else but is all ZooKeeper writes.
SWEEP_BATCH = 2000


class KeySweeperStore(Views, Entities, TopicKeys, Protocol):
    """What the key sweeper uses of the metadata store: the view, the queue as ZooKeeper has
    it now, and the topic keys it unregisters."""


class DefaultKeySweeper(LeaderDuty):
    def __init__(self, scope: LeaderScope) -> None:
        super().__init__(scope)
        self._store: KeySweeperStore = scope.store
        # Keys whose queue was missing at the previous round.
        self._orphaned: set[str] = set()

    async def run(self, interval: float) -> None:
        await repeat_rounds("key sweeper", self._namespace, self.round, interval)

    def orphaned(self) -> set[str]:
        view = self._store.view(self._namespace)
        keys = view.topic_keys.get(DEFAULT_EXCHANGE, frozenset())
        return {key for key in keys if key not in view.queues}

    async def round(self) -> None:
        now = self.orphaned()
        due = sorted(now & self._orphaned)[:SWEEP_BATCH]
        self._orphaned = now
        swept = 0
        for queue in due:
            if await self._sweep(queue):
                swept += 1
        if swept:
            COUNTERS.leader_removed("key sweeper", swept)
            log.info("key sweeper: %d keys of deleted queues swept in %s", swept, self._namespace)

    async def _sweep(self, queue: str) -> bool:
        store, namespace = self._store, self._namespace
        if await store.sync_queue(namespace, queue) is not None:
            return False  # declared again (the view will say so): its key is in use
        if not await store.unregister_topic_key(namespace, DEFAULT_EXCHANGE, queue):
            return False
        # Unregistered first, then checked again: a queue declared in between saw the key
        # (and subscribed) or will be prepared afresh by the next publisher.
        if await store.sync_queue(namespace, queue) is None:
            topic = self._vhost.default_topic(queue)
            await self._vhost.remove_subscription(queue, topic)
        return True
