"""Singleton work of the fleet, done by one replica per namespace: the leader.

Each replica stands for leader of every namespace (vhost) it has open (``MetadataStore.lead``:
an ephemeral sequential znode per candidate, the lowest leads). The leader of a namespace runs:

- the **reaper** (below): deletes exclusive queues whose owner record is gone (the owning
  replica died: its ZooKeeper session expired and took the record with it) and auto-delete
  queues that had consumers and have none left on any replica (their last consumer died with
  its replica, or two replicas cancelled their last ones at the same moment and each still saw
  the other's). Each delete is conditional, checked by the store atomically with it, so a
  leader acting on a stale view deletes nothing it should not; a candidate must also have been
  one for a whole ``tick`` (a queue and its owner record reach the views through two
  listings, and for a moment a view can hold the queue without the owner), and for ``grace``
  seconds (the gateway passes its ZooKeeper session timeout): a replica that lived through a
  partition longer than its session claims its records again as soon as it reaches ZooKeeper
  (metadata/zookeeper/reclaim.py), and its clients' queues must still be there. A dead
  replica's queues go a session timeout after its session did; a partition that outlasts the
  session by more than that loses them;
- the subscription **cleaner** and the **reconciler** (cleaner.py);
- the **key sweeper** of keys left by deleted queues (key_sweeper.py);
- the **TTL sweep** of expired messages no consumer reads (message_ttl_sweep.py);
- the **drop-head trim** of queues over their ``x-max-length`` (length_trim.py);
- **queue expiry**: deletes queues unused for their ``x-expires`` (unused_queue_expiry.py);
- the **delivery record pruner**: removes the delivery records of replicas gone for a day
  (delivery_record_pruner.py);
- the **stream feed**: appends messages routed to streams through exchanges to their logs
  (queue_types/stream/feed.py).

Leadership moves when the leader dies (its candidate node goes with its session) or loses
ZooKeeper (it stops leading at once, and stands again when it is back). A new leader starts
from what the store holds: it needs nothing from the previous one.

Per namespace rather than one leader for everything: the work is per namespace anyway, it
spreads over the replicas, and a replica leads only namespaces it has loaded.
"""

from __future__ import annotations

import logging
from functools import partial

import trio

from gateway.backend.pulsar.leader.cleaner import (
    SubscriptionCleaner,
    SubscriptionReconciler,
    repeat_rounds,
)
from gateway.backend.pulsar.leader.delivery_record_pruner import DeliveryRecordPruner
from gateway.backend.pulsar.leader.key_sweeper import DefaultKeySweeper
from gateway.backend.pulsar.leader.length_trim import LengthTrimmer
from gateway.backend.pulsar.leader.message_ttl_sweep import ExpirySweeper
from gateway.backend.pulsar.leader.queue_stats import QueueStatsRefresher
from gateway.backend.pulsar.leader.scope import LeaderScope
from gateway.backend.pulsar.leader.unused_queue_expiry import QueueExpirer
from gateway.backend.pulsar.queue_types.stream.feed import StreamFeeder
from gateway.backend.pulsar.resources import PulsarResources
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.metadata.chunked import Picked
from gateway.metadata.errors import ConditionNotMet
from gateway.metadata.roles import Views
from gateway.metadata.store import MetadataStore, MetadataUnavailable, QueueCondition, VhostView
from gateway.model.entities import Queue
from gateway.model.vhost import Namespace
from gateway.observability.counters import COUNTERS
from gateway.pulsar.admin import PulsarAdmin

log = logging.getLogger("gateway.leader")

__all__ = ["FleetDuties", "NamespaceLeader"]

# How often the reaper looks at the view (and how long a candidate must have been one).
REAP_TICK = 1.0
# How often the reconciler looks for bindings that miss a subscription.
RECONCILE_INTERVAL = 60.0


def _if_exclusive(queue: Queue) -> Queue | None:
    return queue if queue.owner is not None else None


def _if_auto_delete(queue: Queue) -> Queue | None:
    return queue if queue.auto_delete else None


class FleetDuties:
    """Stands for leader of each namespace this replica opens, for as long as it runs."""

    def __init__(
        self,
        resources: PulsarResources,
        *,
        tick: float = REAP_TICK,
        grace: float = 0.0,
        reconcile_interval: float = RECONCILE_INTERVAL,
    ) -> None:
        self._r = resources
        self._tick = tick
        self._grace = grace
        self._reconcile_interval = reconcile_interval

    async def run(self) -> None:
        store = self._r.store
        known = 0
        async with trio.open_nursery() as nursery:
            while True:
                try:
                    opened = await store.opened(known)
                except MetadataUnavailable:
                    return  # the store closed: the replica is stopping
                for namespace in opened[known:]:
                    nursery.start_soon(self._stand, namespace)
                known = len(opened)

    async def _stand(self, namespace: str) -> None:
        try:
            pulsar_namespace = Namespace.parse(namespace)
        except ValueError:
            log.warning("leader: not standing for %r: not a Pulsar namespace", namespace)
            return
        try:
            await self._r.store.lead(namespace, partial(self._lead, namespace, pulsar_namespace))
        except MetadataUnavailable as error:
            log.info("leader: no longer standing for %s: %s", namespace, error)
        except Exception:
            # A fault of the leader's work must not take the replica (and its clients) down.
            log.exception("leader: standing for %s failed; not standing any more", namespace)

    async def _lead(self, namespace: str, pulsar_namespace: Namespace) -> None:
        leader = NamespaceLeader(
            PulsarVirtualHost(namespace, pulsar_namespace, self._r),
            self._r.store,
            self._r.admin,
            namespace,
            tick=self._tick,
            grace=self._grace,
            drain_interval=self._r.drain_check_interval,
            reconcile_interval=self._reconcile_interval,
        )
        await leader.run()


class NamespaceLeader:
    """What the leader of one namespace does while it leads (cancelled when it stops)."""

    def __init__(
        self,
        vhost: PulsarVirtualHost,
        store: MetadataStore,
        admin: PulsarAdmin,
        namespace: str,
        *,
        tick: float = REAP_TICK,
        grace: float = 0.0,
        drain_interval: float = 5.0,
        reconcile_interval: float = RECONCILE_INTERVAL,
    ) -> None:
        self._vhost = vhost
        # The whole store goes into the duties' scope (each keeps its roles of it); the
        # reaper itself reads the view only.
        self._store: Views = store
        self._namespace = namespace
        self._tick = tick
        self._grace = grace
        self._drain_interval = drain_interval
        self._reconcile_interval = reconcile_interval
        scope = LeaderScope(vhost, store, admin, namespace)
        self.cleaner = SubscriptionCleaner(scope)
        self.queue_stats = QueueStatsRefresher(scope)
        self.reconciler = SubscriptionReconciler(scope)
        self.ttl_sweep = ExpirySweeper(scope)
        self.length_trim = LengthTrimmer(scope)
        self.queue_expiry = QueueExpirer(scope)
        self.key_sweeper = DefaultKeySweeper(scope)
        self.record_pruner = DeliveryRecordPruner(scope)
        self.stream_feed = StreamFeeder(scope)
        # Candidates of the previous tick, with when each became one: acted on when still
        # candidates in this one and for ``grace`` seconds.
        self._orphaned: dict[str, float] = {}
        self._abandoned: dict[str, float] = {}
        # The view version of the last tick that found nothing to do (-1: none yet).
        self._quiet_version = -1
        # Auto-delete queues seen with consumers this term, and ones found never consumed.
        self._consumed: set[str] = set()
        self._unconsumed: set[str] = set()
        # Exclusive and auto-delete queues: the reaper's candidates (looked for only where
        # the queues changed: chunked.py).
        self._exclusive: Picked[str, Queue, Queue] = Picked(_if_exclusive)
        self._auto_delete: Picked[str, Queue, Queue] = Picked(_if_auto_delete)

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._reap_loop)
                nursery.start_soon(self.queue_stats.run)
                nursery.start_soon(self.cleaner.run, self._drain_interval)
                nursery.start_soon(self.reconciler.run, self._reconcile_interval)
                nursery.start_soon(self.ttl_sweep.run)
                nursery.start_soon(self.length_trim.run)
                nursery.start_soon(self.queue_expiry.run)
                nursery.start_soon(self.key_sweeper.run, self._drain_interval)
                nursery.start_soon(self.record_pruner.run)
                nursery.start_soon(self.stream_feed.run)
        finally:
            log.info("leader: stopped leading namespace %s", self._namespace)

    async def _reap_loop(self) -> None:
        await repeat_rounds("reaper", self._namespace, self.reap, self._tick)

    async def reap(self) -> None:
        """One tick: delete the candidates that were candidates at the previous tick too."""
        view = self._store.view(self._namespace)
        if view.version == self._quiet_version:
            # Nothing changed since a tick that found no candidate: looking at every queue
            # again each second would stall the replica's event loop in a large vhost.
            return
        orphaned = {name for name in self._exclusive(view.queues) if name not in view.owned}
        abandoned = self._abandoned_in(view)
        now = trio.current_time()
        for name in self._due(self._orphaned, orphaned, now):
            await self._delete(name, QueueCondition.ORPHANED, "its owner's replica is gone")
        for name in self._due(self._abandoned, abandoned, now):
            if not await self._delete(
                name, QueueCondition.ABANDONED, "its last consumer anywhere is gone"
            ):
                self._unconsumed.add(name)
                self._consumed.discard(name)
        self._orphaned = {name: self._orphaned.get(name, now) for name in orphaned}
        self._abandoned = {name: self._abandoned.get(name, now) for name in abandoned}
        self._quiet_version = view.version if not (orphaned or abandoned) else -1

    def _due(self, previous: dict[str, float], candidates: set[str], now: float) -> list[str]:
        """The candidates that were ones at the previous tick too, for ``grace`` by now."""
        return sorted(
            name for name in candidates if name in previous and now - previous[name] >= self._grace
        )

    def _abandoned_in(self, view: VhostView) -> set[str]:
        """Auto-delete queues without consumers that had some this term, or that this leader
        has not asked the store about yet (a new leader does not know their past)."""
        candidates: set[str] = set()
        for queue in self._auto_delete(view.queues).values():
            if view.consumers.get(queue.name):
                self._consumed.add(queue.name)
                self._unconsumed.discard(queue.name)
            elif queue.name in self._consumed or queue.name not in self._unconsumed:
                candidates.add(queue.name)
        self._consumed = {name for name in self._consumed if name in view.queues}
        self._unconsumed = {name for name in self._unconsumed if name in view.queues}
        return candidates

    async def _delete(self, name: str, condition: QueueCondition, why: str) -> bool:
        try:
            deleted = await self._vhost.drop_queue(name, condition=condition)
        except ConditionNotMet:
            return False
        if deleted:
            COUNTERS.leader_removed("reaper")
            log.info("leader: deleted queue '%s' in %s: %s", name, self._namespace, why)
        return deleted
