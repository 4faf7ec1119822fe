"""The leader's feed of streams: messages routed to a stream through an exchange, appended
to the stream's log (queues.py).

A stream bound to an exchange has a Shared subscription on each topic its bindings cover,
made exactly as a classic queue's (before the binding is visible, on whichever replica
binds), so every message routed to the stream after Bind-Ok is kept there. The leader of the
namespace (one replica: the log has one order) reads those subscriptions with one consumer per
stream and appends each message to the log, acknowledging it only once Pulsar has stored the
copy: nothing is lost when the leader dies. Its copies are named after their originals
(copies.py), so that the broker drops a copy the log already holds: what a dead leader
stored but could not acknowledge is not appended twice by the next one.

The consumer is *exclusive* (the subscription type is chosen by whoever reads it; only the
feed does): a topic's messages reach it in their order, also when Pulsar delivers them again,
which the copies' deduplication relies on; and a next leader's consumer is refused until the
old one's is gone.

Messages from one exchange topic keep their order in the log; those of different topics
interleave in the order the leader receives them. Copies keep the exchange and routing key
they were published with (Basic.Deliver names them, as on RabbitMQ).

The leader looks at the streams again whenever its view of the namespace changes (a binding,
a routing key's first message, a stream declared or deleted), not on a timer: the first
message through a new binding is read as soon as its topic is known here.
"""

from __future__ import annotations

import logging
import time

import trio

from gateway.backend.interface import Stored
from gateway.backend.pulsar.delivery import PulsarDelivery, PulsarQueueSubscription
from gateway.backend.pulsar.leader.scope import LeaderDuty, LeaderScope
from gateway.backend.pulsar.queue_types.dispatch import keeps_log
from gateway.backend.pulsar.queue_types.stream.copies import LogCopier
from gateway.metadata.chunked import Picked
from gateway.metadata.roles import Views
from gateway.metadata.store import MetadataUnavailable, VhostView
from gateway.model.entities import Queue

log = logging.getLogger("gateway.pulsar.stream_feed")

__all__ = ["StreamFeeder"]

# Without a change of the view, the leader still looks this often (a feed whose new topic
# could not be subscribed to tries again).
RECHECK_INTERVAL = 1.0
# A look at the queues takes time (when they changed): the next round waits this many times
# as long, so that the feed takes at most about a third of the replica's time however fast the
# view changes. Only the parts of the queue map that changed are looked at (``streams``):
# microseconds per change, whatever the size of the vhost.
ROUND_SPACING = 2.0
# A routing key's first publisher makes the subscriptions on its topic with Pulsar's admin API
# (activation.py), which resets a subscription that a consumer created meanwhile and
# disconnects that consumer (pulsar-client comes back 100 ms later: measured, the feed's first
# message through a new binding then took 150 ms). So the feed reads a newly bound topic only
# once its subscription is there, looking again this often, for at most ``DEFER_LIMIT`` (then
# it subscribes anyway: its first publisher is gone, and the next one makes the subscription
# before writing).
SUBSCRIPTION_POLL = 0.02
DEFER_LIMIT = 2.0
LOOKUPS = 8
# Messages appended and not yet stored per stream (the pipeline's depth).
IN_FLIGHT = 256
# After a failure, the stream's feed starts again this much later.
RETRY_DELAY = 1.0


def _if_stream(queue: Queue) -> bool | None:
    return True if keeps_log(queue) else None


class _Feed:
    """One stream's running feed: its consumer (None while it starts) and its copier."""

    __slots__ = ("copier", "subscription")

    def __init__(self) -> None:
        self.subscription: PulsarQueueSubscription | None = None
        self.copier: LogCopier | None = None


class StreamFeeder(LeaderDuty):
    """The leader's feed of every stream of one namespace."""

    def __init__(self, scope: LeaderScope) -> None:
        super().__init__(scope)
        self._store: Views = scope.store  # waits for the view to change
        self._feeds: dict[str, _Feed] = {}
        # The streams of the last ``view.queues`` looked at (the views share unchanged parts:
        # a change of bindings or routing keys only does not look at every queue again).
        self._queues: object = None
        self._streams: tuple[str, ...] = ()
        self._picked: Picked[str, Queue, bool] = Picked(_if_stream)
        self._scanned_in = 0.0  # how long the last look at every queue took (seconds)
        # At most this many of those looks at once (a new leader looks at every topic).
        self._lookups = trio.CapacityLimiter(LOOKUPS)
        # (stream, topic) not read yet for want of its subscription -> since when.
        self._deferred: dict[tuple[str, str], float] = {}

    async def run(self, recheck: float = RECHECK_INTERVAL) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                view = self._vhost.catalog.view
                try:
                    await self.round(nursery, view)
                except KeyError:
                    return  # the namespace was closed here
                except Exception:
                    log.warning(
                        "stream feed of %s failed; next round", self._namespace, exc_info=True
                    )
                await trio.sleep(ROUND_SPACING * self._scanned_in)
                with trio.move_on_after(SUBSCRIPTION_POLL if self._deferred else recheck):
                    try:
                        await self._store.changed(self._namespace, view.version)
                    except KeyError:
                        return  # the namespace was deleted (vhost_admin.py)
                    except MetadataUnavailable:
                        await trio.sleep(recheck)

    def streams(self, view: VhostView) -> tuple[str, ...]:
        """The streams of ``view`` (looked for among its queues only where those changed:
        chunked.py)."""
        self._scanned_in = 0.0
        if view.queues is not self._queues:
            started = time.perf_counter()
            self._streams = tuple(self._picked(view.queues))
            self._queues = view.queues
            self._scanned_in = time.perf_counter() - started
        return self._streams

    async def round(self, nursery: trio.Nursery, view: VhostView | None = None) -> None:
        view = view or self._vhost.catalog.view
        streams = self._vhost.streams
        for name, running in list(self._feeds.items()):
            gone = view.queues.get(name)
            subscription = running.subscription
            if subscription is not None and not keeps_log(gone):
                await subscription.end()  # deleted: its feed stops (_append returns)
        deferred, self._deferred = self._deferred, {}
        for name in self.streams(view):
            wanted = streams.feeders(view, name)
            found = self._feeds.get(name)
            if found is None:
                if wanted and await self._subscribed(name, wanted, deferred) == wanted:
                    self._feeds[name] = _Feed()
                    nursery.start_soon(self._feed, name)
                continue
            subscription = found.subscription
            if subscription is not None and not subscription.closed:
                current = set(subscription.consumer.topics)
                for topic in await self._subscribed(name, wanted - current, deferred):
                    await subscription.add_topic(topic)
                for topic in current - wanted:
                    await subscription.remove_topic(topic)

    async def _subscribed(
        self, stream: str, topics: set[str], deferred: dict[tuple[str, str], float]
    ) -> set[str]:
        """Those of ``topics`` whose subscription for ``stream`` is there (or that waited
        ``DEFER_LIMIT``); the others are looked at again (``SUBSCRIPTION_POLL``)."""
        now = trio.current_time()
        ready: set[str] = set()

        async def look(topic: str) -> None:
            since = deferred.get((stream, topic), now)
            async with self._lookups:
                there = await self._vhost.streams.subscribed(topic, stream)
            if there or now - since >= DEFER_LIMIT:
                ready.add(topic)
            else:
                self._deferred[(stream, topic)] = since

        async with trio.open_nursery() as nursery:
            for topic in topics:
                nursery.start_soon(look, topic)
        return ready

    async def _feed(self, stream: str) -> None:
        """Append what the stream's subscriptions receive to its log, until it is gone."""
        try:
            while stream in self._vhost.catalog.view.queues:
                try:
                    await self._append(stream)
                except Exception as error:
                    # Also while the previous leader's consumer or producers are still
                    # connected (ConsumerBusy, ProducerBusy): until they are gone.
                    log.warning("feeding stream '%s' in %s: %s", stream, self._namespace, error)
                    await trio.sleep(RETRY_DELAY)
        finally:
            self._feeds.pop(stream, None)

    async def _append(self, stream: str) -> None:
        vhost = self._vhost
        running = self._feeds.setdefault(stream, _Feed())
        copier = running.copier = vhost.streams.copier(stream, IN_FLIGHT)
        try:
            await copier.start()
            feed = await vhost.sweeper(stream, IN_FLIGHT, subscription_type="exclusive")
        except BaseException:
            with trio.CancelScope(shield=True):
                await copier.aclose()
            raise
        running.subscription = feed
        send, receive = trio.open_memory_channel[tuple[Stored, PulsarDelivery]](IN_FLIGHT)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._acknowledge, receive)
                async with send:
                    while True:
                        try:
                            delivery = await feed.receive()
                        except Exception:
                            if stream not in vhost.catalog.view.queues:
                                return  # deleted: SubscriptionEnded or the consumer closed
                            raise
                        original = delivery.received
                        stored = await copier.copy(
                            original.topic, original.message_id, delivery.message
                        )
                        await send.send((stored, delivery))
        finally:
            running.subscription = None
            with trio.CancelScope(shield=True):
                await feed.close()  # what was not acknowledged is received again
                await copier.aclose()

    @staticmethod
    async def _acknowledge(
        receive: trio.MemoryReceiveChannel[tuple[Stored, PulsarDelivery]],
    ) -> None:
        """In order: once a copy is stored, its original goes."""
        async with receive:
            async for stored, delivery in receive:
                await stored.durable()
                await delivery.ack()
