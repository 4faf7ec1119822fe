"""Whether a publish routes anywhere, and the handshake that makes a new key's topic safe.

Used by the publish path (sending.py): a topic exchange's new routing key (and, with lazy
subscriptions, a direct or default exchange's) is *prepared* before this replica's first
message to its topic: registered in ZooKeeper, then every queue a path of bindings leads to
with that key (exchange bindings included, read from ZooKeeper: zk_graph.py) subscribed
(activation.py explains the handshake). When the view says "unroutable", ZooKeeper has the
last word before a message goes to an alternate exchange or back as Basic.Return.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping

import trio

from gateway.amqp.errors import AMQPError
from gateway.backend.catalog import Catalog
from gateway.backend.interface import Message
from gateway.backend.pulsar.activation import lazy_exchange
from gateway.backend.pulsar.queue_types.dispatch import keeps_log
from gateway.backend.pulsar.resources import PulsarResources
from gateway.backend.pulsar.zk_graph import ZooKeeperGraph
from gateway.metadata.store import VhostView
from gateway.model.entities import DEFAULT_EXCHANGE, Exchange, ExchangeType
from gateway.model.graph import binding_passes
from gateway.model.naming import topic_for
from gateway.model.vhost import Namespace


class PublishRoutes:
    """Routing decisions of one vhost's publishes, and the keys this replica prepared."""

    def __init__(
        self,
        catalog: Catalog,
        namespace: Namespace,
        resources: PulsarResources,
        subscribe: Callable[[str, str], Awaitable[None]],
    ) -> None:
        self.catalog = catalog
        self.namespace = namespace
        self._resources = resources
        # subscribe(topic, queue): queue_subscriptions.py's subscribe_to_write, which returns
        # once the subscription exists (the queue's consumers get the topic meanwhile).
        self._subscribe = subscribe
        #: (exchange, key) pairs prepared by this replica (not prepared again).
        self.prepared_keys: set[tuple[str, str]] = set()

    async def routes(self, exchange: Exchange, message: Message) -> bool:
        """Whether ``exchange`` routes ``message`` anywhere, as far as this replica knows
        (a topic exchange's new key is prepared first: its bindings are read from ZooKeeper)."""
        key = message.routing_key
        if (exchange.name, key) not in self.prepared_keys and await self.prepare(exchange, key):
            return True
        return bool(self.catalog.routes(self.catalog.view, exchange, message))

    def routes_now(self, exchange: Exchange, message: Message, view: VhostView) -> bool | None:
        """``routes`` in ``view`` when it need not wait: None if the key has to be prepared
        first."""
        if self.unprepared(exchange, message.routing_key):
            return None
        return bool(self.catalog.routes(view, exchange, message))

    def unprepared(self, exchange: Exchange, key: str) -> bool:
        """Whether ``exchange``'s ``key`` has a topic of its own that this replica has not
        prepared yet: its first message waits for that (``prepare``)."""
        return (exchange.name, key) not in self.prepared_keys and (
            exchange.type is ExchangeType.TOPIC or self._lazy_default_or_direct(exchange)
        )

    async def prepare(self, exchange: Exchange, key: str) -> bool:
        """Prepare ``exchange``'s ``key`` before this replica's first message to its topic
        (if it has a topic per key); True when that found a queue to route to."""
        if (exchange.name, key) in self.prepared_keys:
            return False
        if exchange.name == DEFAULT_EXCHANGE and not key:
            # No queue is named "" (Queue.Declare names one declared without a name): the
            # default exchange's empty key routes nowhere, as on RabbitMQ, and needs no topic.
            # Registered, the leader's key sweep took it for a deleted queue named "" and
            # logged a failure removing that queue's subscription (amqplib's suite publishes
            # so).
            self.prepared_keys.add((exchange.name, key))
            return False
        if exchange.type is ExchangeType.TOPIC or self._lazy_default_or_direct(exchange):
            return await self._prepare_key(exchange, key)
        return False

    async def alternate(self, exchange: Exchange) -> Exchange | None:
        """``exchange``'s alternate exchange, looked up in ZooKeeper if the view lacks it."""
        if "alternate-exchange" not in exchange.arguments:
            return None
        found = self.catalog.alternate(self.catalog.view, exchange)
        if found is None:
            name = exchange.arguments["alternate-exchange"].value
            with contextlib.suppress(AMQPError):  # missing: routes nothing, as on RabbitMQ
                found = await self.catalog.require_fresh_exchange(str(name))
        return found

    async def bound_in_zookeeper(self, exchange: Exchange, key: str) -> bool:
        """Whether a binding of ``exchange`` that ZooKeeper has now (to a queue or to an
        exchange) routes ``key``: then it does not pass the message on to its alternate
        exchange. Headers bindings match on arguments, which this read leaves out: for them
        the view decides."""
        if exchange.type is ExchangeType.HEADERS:
            return False
        store = self._resources.store
        if exchange.name == DEFAULT_EXCHANGE:  # bound to every queue by its name
            found = await self.catalog.write(store.sync_queue(self.catalog.namespace, key))
            return found is not None
        edges = await self.catalog.write(store.sync_edges_of(self.catalog.namespace, exchange.name))
        return any(
            binding_passes(exchange.type, pattern, key)
            for _, pattern in (*edges.queues, *edges.outgoing)
        )

    async def routes_in_zookeeper(self, exchange: Exchange, key: str) -> bool:
        """Whether bindings that ZooKeeper has now lead a message with ``key`` from
        ``exchange`` to a queue (through exchange bindings and alternate exchanges, each
        exchange once): the last word before a mandatory message is returned. Headers
        exchanges are left to the view (their arguments are not read)."""
        graph = ZooKeeperGraph(self.catalog, self._resources.store)
        seen = {exchange.name}
        pending = [exchange]
        while pending:
            current = pending.pop()
            if current.type is ExchangeType.HEADERS:
                continue
            if current.name == DEFAULT_EXCHANGE:
                if await self.bound_in_zookeeper(current, key):
                    return True
                continue
            edges = await graph.edges(current.name)
            if any(binding_passes(current.type, k, key) for _, k in edges.queues):
                return True
            onward = sorted(d for d, k in edges.outgoing if binding_passes(current.type, k, key))
            if not onward:
                alternate = await self.alternate(current)
                onward = [] if alternate is None else [alternate.name]
            for name in onward:
                target = await graph.exchange(name)
                if name not in seen and target is not None:
                    seen.add(name)
                    pending.append(target)
        return False

    def _lazy_default_or_direct(self, exchange: Exchange) -> bool:
        return self._resources.lazy_subscriptions and lazy_exchange(exchange)

    async def _prepare_key(self, exchange: Exchange, key: str) -> bool:
        """``_subscribe_key``, with the topic's producer made meanwhile, in the background.

        The message that follows needs both; one after the other, the first publish to a new
        key waited for their sum (its confirm came after 78 ms on the development VM), now for
        the longer (docs/benchmarks.md): the publish joins the creation under way
        (producer_cache.py). Whichever reaches Pulsar first creates the topic; nothing is
        written before the subscriptions exist, so their order does not matter. A producer
        that cannot be made is left to the publish, which tries again and says why."""
        topic = topic_for(self.namespace, exchange.name, key)
        with contextlib.suppress(RuntimeError):  # the nursery is closed: shutting down
            self._resources.nursery.start_soon(self._make_producer, topic)
        return await self._subscribe_key(exchange, key, topic)

    async def _make_producer(self, topic: str) -> None:
        # Whatever fails here, the publish that follows meets again on its own path (the same
        # ProducerCache.get) and answers for; raised here, it would end the nursery every
        # vhost's background work shares.
        with contextlib.suppress(Exception):
            await self._resources.producers.get(topic)

    async def _subscribe_key(self, exchange: Exchange, key: str, topic: str) -> bool:
        """A direct or topic exchange's key (or the default exchange's queue name) has its
        own topic: before this replica's first message to it, every binding that routes the
        key must have its subscription there. Returns whether one does (the view may not
        know it yet).

        The key is registered first (making the topic active, activation.py), then what it
        routes to is read from ZooKeeper, not from the view: a queue or binding made on
        another replica just before may not be in the view yet, and that replica, when it
        looked for the key after its write, did not see it (declare_queue and bind_queue do
        the mirror image, zk_graph.py for exchange bindings). Whichever write is second sees
        the first, so the subscription exists before the message is written."""
        store, namespace = self._resources.store, self.catalog.namespace
        await self.catalog.write(store.register_topic_key(namespace, exchange.name, key))
        routed: list[str] = []
        if exchange.name == DEFAULT_EXCHANGE:
            found = await self.catalog.write(store.sync_queue(namespace, key))
            if keeps_log(found):
                # The topic is the stream's log itself: it needs no subscription.
                self.prepared_keys.add((exchange.name, key))
                return True
            if found is not None:
                routed.append(key)
        else:
            # Where bindings lead with this key, as ZooKeeper has them: one read of the
            # exchange's node, and one per exchange its exchange bindings lead to.
            graph = ZooKeeperGraph(self.catalog, store)
            await graph.downstream(exchange.name, key)
            subscribing = sorted((await graph.graph()).reach(exchange, key))
            # What it answers is whether its own bindings route the key (exchange bindings
            # may lead through a headers exchange, whose arguments are not read here).
            own = (await graph.edges(exchange.name)).queues
            routed = [q for q, k in own if binding_passes(exchange.type, k, key)]
            await self._subscribe_all(topic, subscribing)
            self.prepared_keys.add((exchange.name, key))
            return bool(routed)
        await self._subscribe_all(topic, routed)
        self.prepared_keys.add((exchange.name, key))
        return bool(routed)

    async def _subscribe_all(self, topic: str, queues: list[str]) -> None:
        """Each of ``queues`` subscribed on ``topic``, all at once rather than one after the
        other: the first creation makes the topic (~50-60 ms of the broker's), the others wait
        for it in Pulsar, then take ~25 ms each (docs/fleet.md), which in a row added up for a
        key bound to several queues. The first failure is raised once every creation has
        ended (none is cancelled halfway), and the key stays unprepared: the next publish
        tries again."""
        if len(queues) <= 1:
            for queue in queues:
                await self._subscribe(topic, queue)
            return
        failures: list[Exception] = []

        async def subscribe(queue: str) -> None:
            try:
                await self._subscribe(topic, queue)
            except Exception as error:
                failures.append(error)

        async with trio.open_nursery() as nursery:
            for queue in queues:
                nursery.start_soon(subscribe, queue)
        if failures:
            raise failures[0]

    def forget_unregistered(self, keys: Mapping[str, frozenset[str]]) -> None:
        """A key the leader unregistered (its queue long gone, leader/cleaner.py) is prepared again
        by the next publish: a queue declared since may be waiting for that handshake."""
        self.prepared_keys = {
            (exchange, key) for exchange, key in self.prepared_keys if key in keys.get(exchange, ())
        }
