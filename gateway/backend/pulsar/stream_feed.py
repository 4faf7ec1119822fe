"""The leader's feed of streams: messages routed to a stream through an exchange, appended
to the stream's log (streams.py).

A stream bound to an exchange has a Shared subscription on each topic its bindings cover,
made exactly as a classic queue's (before the binding is visible, on whichever replica
binds), so every message routed to the stream after Bind-Ok is kept there. The leader of the
namespace (one replica: the log has one order) reads those subscriptions with one consumer per
stream and appends each message to the log, acknowledging it only once Pulsar has stored the
copy: nothing is lost when the leader dies. A message stored in the log whose
acknowledgement did not reach Pulsar before the leader died is appended again by the next
leader: the log then holds it twice (at least once, as RabbitMQ's own publishers get on a
retried publish).

Messages from one exchange topic keep their order in the log; those of different topics
interleave in the order the leader receives them. Copies keep the exchange and routing key
they were published with (Basic.Deliver names them, as on RabbitMQ).
"""

from __future__ import annotations

import logging

import trio

from gateway.backend.interface import Stored
from gateway.backend.pulsar.delivery import PulsarDelivery, PulsarQueueSubscription
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.model.arguments import is_stream

log = logging.getLogger("gateway.pulsar.stream_feed")

__all__ = ["StreamFeeder"]

# How often the leader looks for streams to feed and for their topics' changes: a binding's
# topic is read within this much of its first message (which waits in its subscription).
FEED_INTERVAL = 0.2
# Messages appended and not yet stored per stream (the pipeline's depth).
IN_FLIGHT = 256
# After a failure, the stream's feed starts again this much later.
RETRY_DELAY = 1.0


class StreamFeeder:
    """The leader's feed of every stream of one namespace."""

    def __init__(self, vhost: PulsarVirtualHost, namespace: str) -> None:
        self._vhost = vhost
        self._namespace = namespace
        # stream -> its feed's consumer (None while it starts)
        self._feeds: dict[str, PulsarQueueSubscription | None] = {}

    async def run(self, interval: float = FEED_INTERVAL) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                try:
                    await self.round(nursery)
                except KeyError:
                    return  # the namespace was closed here
                except Exception:
                    log.warning(
                        "stream feed of %s failed; next round", self._namespace, exc_info=True
                    )
                await trio.sleep(interval)

    async def round(self, nursery: trio.Nursery) -> None:
        view = self._vhost.catalog.view
        streams = self._vhost.streams
        for name, running in list(self._feeds.items()):
            gone = view.queues.get(name)
            if running is not None and (gone is None or not is_stream(gone.arguments)):
                await running.end()  # deleted: its feed stops (_append returns)
        for name, queue in view.queues.items():
            if not is_stream(queue.arguments):
                continue
            wanted = streams.feeders(view, name)
            if name not in self._feeds:
                if wanted:
                    self._feeds[name] = None
                    nursery.start_soon(self._feed, name)
                continue
            feed = self._feeds[name]
            if feed is not None and not feed.closed:
                current = set(feed.consumer.topics)
                for topic in wanted - current:
                    await feed.add_topic(topic)
                for topic in current - wanted:
                    await feed.remove_topic(topic)

    async def _feed(self, stream: str) -> None:
        """Append what the stream's subscriptions receive to its log, until it is gone."""
        try:
            while stream in self._vhost.catalog.view.queues:
                try:
                    await self._append(stream)
                except Exception as error:
                    log.warning("feeding stream '%s' in %s: %s", stream, self._namespace, error)
                    await trio.sleep(RETRY_DELAY)
        finally:
            self._feeds.pop(stream, None)

    async def _append(self, stream: str) -> None:
        vhost = self._vhost
        feed = await vhost.sweeper(stream, IN_FLIGHT)
        self._feeds[stream] = feed
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
                        stored = await vhost.streams.append(stream, delivery.message)
                        await send.send((stored, delivery))
        finally:
            with trio.CancelScope(shield=True):
                await feed.close()  # what was not acknowledged is received again

    @staticmethod
    async def _acknowledge(
        receive: trio.MemoryReceiveChannel[tuple[Stored, PulsarDelivery]],
    ) -> None:
        """In order: once a copy is stored, its original goes."""
        async with receive:
            async for stored, delivery in receive:
                await stored.durable()
                await delivery.ack()
