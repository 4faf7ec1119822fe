"""The leader's subscription work: the cleaner, and the reconciler as a safety net.

**Cleaner.** Drain records (drains.py) say which subscriptions no binding needs any more. Every
``interval`` the leader of the namespace looks at each:

- *draining* (``end`` set): once the subscription's cursor has acknowledged everything up to
  ``end`` (its mark-delete position, from the topic's internal stats), everything routed before
  the unbind has been consumed; what the subscription holds after ``end`` is not the queue's
  (its consumers would only drop it), so nobody needs to read it. If the queue was bound again
  meanwhile (``resumed``), the record is dropped once the cursor is past ``resumed`` (the
  subscription lives on); otherwise it becomes a *removal* record.
- *removal* (``REMOVE``): written by a queue delete, or by the step above. It is acted on only
  when it was already there in the previous round: every replica's consumers stop reading a
  topic as soon as their view has the removal record, and a subscription deleted under a
  consumer that still reads it would be re-created by that consumer's reconnection. Then the
  subscription is deleted from Pulsar and the record dropped, unless the queue (re-declared,
  or bound again) reads the topic again: then only the record goes.

Every change of a record is compare-and-set on the version the cleaner read, so a record that
an unbind or a rebind rewrote meanwhile is left for the next round.

**Reconciler.** A topic exchange's new routing key and a pattern binding made at the same
moment on two replicas can miss each other (each replica's view lags the other's write by a
few milliseconds), leaving the binding without its subscription on the new key's topic; so
can the bindings of a path through exchange bindings made on several replicas at once. Every
``reconcile_interval`` the leader makes sure each (pattern binding, matching key) pair has its
subscription; pairs it has checked are remembered for its whole term, so a steady fleet costs
nothing but the first pass. Messages written to that topic before the repair are not recovered.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol
from urllib.parse import quote, quote_plus

import trio

from gateway.backend.pulsar.leader.scope import LeaderDuty, LeaderScope
from gateway.metadata.errors import MissingEntity
from gateway.metadata.roles import Drains, Views
from gateway.metadata.store import (
    REMOVE,
    DrainRecord,
    MetadataUnavailable,
    Position,
    VhostView,
)
from gateway.model.entities import ExchangeType
from gateway.model.naming import subscription_for
from gateway.model.routing import compile_topic
from gateway.observability.counters import COUNTERS
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.errors import AdminError, NotFound
from gateway.pulsar.names import topic_rest_path

log = logging.getLogger("gateway.leader")

# The reconciler's walk over the vhost's bindings yields to the other tasks this often (a
# direct binding costs it a lookup: a million of them held the leader's trio thread ~0.6 s).
BINDINGS_PER_TURN = 10_000

__all__ = ["SubscriptionCleaner", "SubscriptionReconciler", "repeat_rounds"]


async def repeat_rounds(
    job: str,
    namespace: str,
    one_round: Callable[[], Awaitable[None]],
    interval: float,
    *,
    wait_first: bool = False,
) -> None:
    """Run ``one_round`` every ``interval`` seconds until the namespace is closed here (the
    round raises KeyError). A round that fails is logged and the next one runs as planned:
    the leader's jobs work from what the store holds now, so a missed round costs nothing."""
    while True:
        if wait_first:
            await trio.sleep(interval)
        try:
            await one_round()
        except MetadataUnavailable as error:
            COUNTERS.leader_round(job, failed=True)
            log.info("%s of %s: metadata unavailable (%s)", job, namespace, error)
        except KeyError:
            return  # the namespace was closed here: nothing left to do
        except Exception:
            COUNTERS.leader_round(job, failed=True)
            log.warning("%s of %s failed; next round", job, namespace, exc_info=True)
        else:
            COUNTERS.leader_round(job)
        if not wait_first:
            await trio.sleep(interval)


class CleanerStore(Views, Drains, Protocol):
    """What the cleaner uses of the metadata store: the view, and the drain records it
    changes by compare-and-set."""


class SubscriptionCleaner(LeaderDuty):
    def __init__(self, scope: LeaderScope) -> None:
        super().__init__(scope)
        self._store: CleanerStore = scope.store
        # Removal records seen in the previous round (acted on in this one).
        self._removals: set[tuple[str, str]] = set()

    async def run(self, interval: float) -> None:
        await repeat_rounds("cleaner", self._namespace, self.round, interval, wait_first=True)

    async def round(self) -> None:
        """One look at every record."""
        view = self._store.view(self._namespace)
        for (queue, local), record in list(view.drains.items()):
            if record.removing:
                if (queue, local) in self._removals:
                    await self._remove(view, queue, local)
            else:
                await self._drain(view, queue, local, record)
        # Those there now (ours of this round included) are acted on next round.
        after = self._store.view(self._namespace)
        self._removals = {key for key, record in after.drains.items() if record.removing}

    async def _remove(self, view: VhostView, queue: str, local: str) -> None:
        topic = self._vhost.topic(local)
        if self._vhost.needs(view, queue, topic):
            await self._replace(queue, local, REMOVE, None)  # its queue reads it again
            return
        if await self._vhost.remove_subscription(queue, topic):
            COUNTERS.leader_removed("cleaner")
            log.info("cleaner: removed the subscription of queue '%s' on %s", queue, topic)

    async def _drain(self, view: VhostView, queue: str, local: str, record: DrainRecord) -> None:
        topic = self._vhost.topic(local)
        if queue not in view.queues:
            # Only a queue delete that raced this record's write leaves one behind.
            await self._replace(queue, local, record, REMOVE)
            return
        try:
            acknowledged = await acknowledged_up_to(self._admin, topic, subscription_for(queue))
        except NotFound:
            acknowledged = None
        except AdminError as error:
            log.info("cleaner: cannot read the cursor of '%s' on %s: %s", queue, topic, error)
            return
        if acknowledged is None:
            await self._replace(queue, local, record, None)  # no subscription: nothing to drain
            return
        target = record.resumed if record.resumed is not None else record.end
        if target is not None and acknowledged < target:
            return  # still draining
        bound = topic in self._vhost.bound_topics(view, queue)
        if record.resumed is not None or bound:
            # Bound again: the subscription lives on, and nothing of the unbound window is left.
            await self._replace(queue, local, record, None)
        elif await self._replace(queue, local, record, REMOVE):
            log.info("cleaner: queue '%s' drained %s; its subscription goes next", queue, topic)

    async def _replace(
        self, queue: str, local: str, expected: DrainRecord, record: DrainRecord | None
    ) -> bool:
        """Replace the record (None: drop it) if it is still ``expected``."""
        stored = await self._store.read_drain(self._namespace, queue, local)
        if stored is None or stored[0] != expected:
            return False
        return await self._store.update_drain(
            self._namespace, queue, local, record, version=stored[1]
        )


async def acknowledged_up_to(admin: PulsarAdmin, topic: str, subscription: str) -> Position | None:
    """The subscription's mark-delete position: every message up to it is acknowledged (None:
    the topic has no such subscription). NotFound if the topic does not exist."""
    response = await admin.request("GET", topic_rest_path(topic) + "/internalStats")
    cursors = response.json().get("cursors") or {}
    # The broker names cursors URL-encoded ("=" is "%3D").
    for name in (subscription, quote(subscription, safe=""), quote_plus(subscription)):
        cursor = cursors.get(name)
        if cursor is not None:
            ledger, _, entry = str(cursor.get("markDeletePosition", "")).partition(":")
            try:
                return (int(ledger), int(entry))
            except ValueError:
                return None
    return None


class SubscriptionReconciler(LeaderDuty):
    def __init__(
        self, scope: LeaderScope, on_repair: Callable[[str, str], None] | None = None
    ) -> None:
        super().__init__(scope)
        self._store: Views = scope.store  # reads the view only
        self._verified: set[tuple[str, str]] = set()
        self._on_repair = on_repair

    async def run(self, interval: float) -> None:
        await repeat_rounds("reconciler", self._namespace, self.round, interval)

    async def expected(self, view: VhostView) -> set[tuple[str, str]]:
        """(queue, topic) of every topic-exchange pattern binding and key it matches, and of
        every topic in use that reaches a queue through exchange bindings (their handshakes
        involve several replicas' records: binding_subscriptions.py)."""
        pairs = self._vhost.fed_through_exchanges(view)
        for walked, binding in enumerate(view.bindings, start=1):
            if walked % BINDINGS_PER_TURN == 0:
                await trio.lowlevel.checkpoint()  # a million bindings: not in one go
            exchange = view.exchanges.get(binding.exchange)
            if exchange is None or exchange.type is not ExchangeType.TOPIC:
                continue
            if compile_topic(binding.routing_key).shape == "literal":
                continue  # one topic, subscribed before the binding was written
            for topic in self._vhost.binding_topics(view, binding):
                pairs.add((binding.queue, topic))
        return pairs

    async def round(self) -> None:
        view = self._store.view(self._namespace)
        expected = await self.expected(view)
        self._verified &= expected
        for queue, topic in sorted(expected - self._verified):
            if queue not in self._store.view(self._namespace).queues:
                continue
            try:
                created = await self._admin.create_subscription(
                    topic, subscription_for(queue), "latest"
                )
            except (AdminError, MissingEntity) as error:
                log.info("reconciler: cannot check '%s' on %s: %s", queue, topic, error)
                continue
            if created and queue not in self._store.view(self._namespace).queues:
                # Deleted while we created it: nothing would ever remove this one.
                await self._vhost.remove_subscription(queue, topic)
                continue
            if created:
                log.warning(
                    "reconciler: queue '%s' was bound to %s without a subscription there "
                    "(a binding and a new routing key raced); created it",
                    queue,
                    topic,
                )
                if self._on_repair is not None:
                    self._on_repair(queue, topic)
            self._verified.add((queue, topic))
