"""Queues' subscriptions on Pulsar topics: made, handed to this replica's consumers, removed.

A queue reads a topic through its Shared subscription there (docs/mapping.md). This module
creates one (once per (queue, topic) at a time on this replica, retrying when another replica
creates it at the same moment), gives the topic to the queue's consumers of this replica,
and takes it away and deletes the subscription again, unless a consumer on another replica
may still read it (then the leader does, leader/cleaner.py).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from gateway.backend.catalog import Catalog
from gateway.backend.pulsar.activation import Activation
from gateway.backend.pulsar.delivery import PulsarQueueSubscription
from gateway.backend.pulsar.queue_topics import QueueTopics
from gateway.backend.pulsar.reply_codes import to_amqp_error
from gateway.backend.pulsar.resources import PulsarResources
from gateway.metadata.store import VhostView
from gateway.model.naming import subscription_for
from gateway.pulsar.errors import PreconditionFailed

__all__ = ["SUBSCRIBE_ATTEMPTS", "QueueSubscriptions"]

log = logging.getLogger("gateway.pulsar.vhost")

# Tries at creating a subscription that another replica is creating at the same moment.
SUBSCRIBE_ATTEMPTS = 5


class _Creation:
    """One creation of a subscription under way on this replica, and how it ended."""

    __slots__ = ("done", "made")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.made = False


class QueueSubscriptions:
    """The subscriptions of one vhost's queues, and which of this replica's consumers read
    which topic."""

    def __init__(
        self,
        catalog: Catalog,
        topics: QueueTopics,
        resources: PulsarResources,
        consumers: Mapping[str, set[PulsarQueueSubscription]],
        getters: Mapping[str, PulsarQueueSubscription],
    ) -> None:
        self._catalog = catalog
        self._topics = topics
        self._r = resources
        # The vhost's own tables, read live: its consumers by queue, and its Basic.Get
        # consumers by queue (basic_get.py), that a removed topic is taken from too.
        self._consumers = consumers
        self._getters = getters
        # (queue, topic) -> this replica's creation of that subscription under way.
        self._creating: dict[tuple[str, str], _Creation] = {}
        # queue -> its topics being given to this replica's consumers in the background
        # (subscribe_to_write), each set when done.
        self._giving: dict[str, list[trio.Event]] = {}

    async def subscribe(self, topic: str, queue: str) -> None:
        """Make sure ``queue``'s subscription on ``topic`` exists, then give the topic to
        this replica's consumers of the queue, highest priority first. One creation per
        (queue, topic) at a time on this replica: a consumer attached while Pulsar creates
        the subscription would be disconnected by it (a create that finds the subscription
        made meanwhile resets its cursor), and come back a moment later, after other
        consumers had the first messages."""
        await self._made(topic, queue)
        for subscription in self.by_priority(queue):
            await subscription.add_topic(topic)

    async def subscribe_to_write(self, topic: str, queue: str) -> None:
        """``subscribe`` for a publisher about to write to ``topic``: returns once the
        subscription exists, and gives the topic to this replica's consumers of the queue in
        the background. The message written next is kept by the subscription whether or not
        a consumer is attached yet, and goes to the first one that is, highest priority
        first as with ``subscribe``; the publisher need not wait for them (a consumer's
        attach took 5-15 ms of the first publish's confirm, docs/benchmarks.md). One that
        fails is logged: the next change of the view gives the topic again (vhost.py's
        ``_reconcile``), as when the metadata watch's own ``subscribe`` fails. The queue's
        Basic.Get consumer gets it last, so that a Get after the confirm finds the message
        without waiting for the view's change to reach it."""
        await self._made(topic, queue)
        if not self._consumers.get(queue) and queue not in self._getters:
            return
        given = trio.Event()
        self._giving.setdefault(queue, []).append(given)
        try:
            self._r.nursery.start_soon(self._give_logged, topic, queue, given)
        except RuntimeError:  # the nursery is closed: shutting down
            self._given(queue, given)

    async def _give_logged(self, topic: str, queue: str, given: trio.Event) -> None:
        try:
            getter = self._getters.get(queue)
            for subscription in [*self.by_priority(queue), *([getter] if getter else [])]:
                try:
                    await subscription.add_topic(topic)
                except Exception as error:
                    log.warning("giving %s to a consumer of '%s' failed: %s", topic, queue, error)
        finally:
            self._given(queue, given)

    def _given(self, queue: str, given: trio.Event) -> None:
        given.set()
        waiting = self._giving[queue]
        waiting.remove(given)
        if not waiting:
            del self._giving[queue]

    async def gives_done(self, queue: str) -> None:
        """Until the topics being given to this replica's consumers of ``queue`` (and its
        Basic.Get consumer) in the background are theirs. A Basic.Get waits for them: on
        RabbitMQ a message enqueued while a consumer is ready goes to that consumer, so a Get
        right after the publish finds nothing (the Java client's doAutoDelete test); had the
        Get's own consumer attached first, Pulsar could give the message to it instead. And
        a Get after the confirm finds the message (its consumer has the topic)."""
        for given in list(self._giving.get(queue, ())):
            await given.wait()

    async def _made(self, topic: str, queue: str) -> None:
        """Until ``queue``'s subscription on ``topic`` exists, made here or by the creation
        under way. A creation that failed (Pulsar refusing new topics while it recovers) or
        was cancelled with its caller's connection proves nothing: a waiter that carried on
        would let a publish write to a topic nobody subscribed, and confirm messages that
        no queue keeps. So each waiter then makes it itself, or fails itself."""
        key = (queue, topic)
        while (pending := self._creating.get(key)) is not None:
            await pending.done.wait()
            if pending.made:
                return
        creation = self._creating[key] = _Creation()
        try:
            await self._create(topic, queue)
            creation.made = True
        finally:
            del self._creating[key]
            creation.done.set()

    async def creations_done(self, queue: str) -> None:
        """Until this replica's creations of ``queue``'s subscriptions under way are done: a
        consumer attached meanwhile would be disconnected."""
        for (pending_queue, _topic), pending in list(self._creating.items()):
            if pending_queue == queue:
                await pending.done.wait()

    async def _create(self, topic: str, queue: str) -> None:
        what = f"subscribing queue '{queue}' to {topic}"
        for attempt in range(SUBSCRIBE_ATTEMPTS):
            try:
                await self._r.admin.create_subscription(topic, subscription_for(queue), "latest")
                break
            except PreconditionFailed as error:
                # Two replicas creating the same subscription at once: Pulsar answers the
                # second "Subscription Busy" (412) while the first completes. Once it has,
                # the next attempt finds it (409, fine).
                if attempt == SUBSCRIBE_ATTEMPTS - 1:
                    raise to_amqp_error(error, what) from None
                await trio.sleep(0.05 * (attempt + 1))
            except Exception as error:
                raise to_amqp_error(error, what) from None

    def by_priority(self, queue: str) -> list[PulsarQueueSubscription]:
        """This replica's consumers of ``queue``, highest priority first: the order they are
        given a new topic in, so that its first messages go to the highest (a Pulsar
        consumer gets messages from the moment it is attached)."""
        return sorted(self._consumers.get(queue, ()), key=lambda s: -s.priority)

    async def subscribe_if_active(
        self,
        activation: Activation,
        topic: str,
        queue: str,
        *,
        undo: Callable[[str], Awaitable[Any]],
    ) -> None:
        """The binder's half of the handshake (activation.py), after its write: subscribe
        ``queue`` on ``topic`` if ZooKeeper has the key now. If Pulsar fails, ``undo`` the
        write (a queue or binding answered without its subscription would lose messages)."""
        store = self._r.store
        registered = await self._catalog.write(
            store.sync_topic_key(self._catalog.namespace, *activation)
        )
        if not registered:
            return
        try:
            await self.subscribe(topic, queue)
        except BaseException:
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await undo(queue)
            raise

    async def unsubscribe(self, topic: str, queue: str) -> None:
        """Take ``topic`` from this replica's consumers of ``queue``, then delete the queue's
        subscription on it."""
        for subscription in self._consumers.get(queue, ()):
            await subscription.remove_topic(topic)
        getter = self._getters.get(queue)
        if getter is not None:
            await getter.remove_topic(topic)
        await self.remove(queue, topic)

    def alone(self, view: VhostView, queue: str) -> bool:
        """Whether no other replica has a consumer of ``queue`` (as far as ``view`` knows).
        Only then is a subscription deleted at once: a consumer elsewhere still reading it
        would be disconnected, and its reconnection would create it again, with no record
        left to remove it. Otherwise the leader deletes it a round later (leader/cleaner.py)."""
        return view.consumers.get(queue, 0) <= len(self._consumers.get(queue, ()))

    async def remove(self, queue: str, topic: str) -> bool:
        """Delete the queue's subscription on ``topic`` from Pulsar, then its ``REMOVE``
        record; False (leaving both to the leader's next round) if Pulsar or ZooKeeper
        refused."""
        try:
            await self._r.admin.delete_subscription(topic, subscription_for(queue), force=True)
            store = self._r.store
            local = self._topics.local(topic)
            stored = await store.read_drain(self._catalog.namespace, queue, local)
            if stored is not None and stored[0].removing:
                await store.update_drain(
                    self._catalog.namespace, queue, local, None, version=stored[1]
                )
        except Exception as error:  # the records stay; the leader tries again
            log.warning(
                "removing the subscription of queue '%s' on %s failed (the leader will try "
                "again): %s",
                queue,
                topic,
                error,
            )
            return False
        return True
