"""Whether a publish routes anywhere, and the handshake that makes a new key's topic safe.

Used by the vhost's publish path (vhost.py ``_send``): a topic exchange's new routing key (and,
with lazy subscriptions, a direct or default exchange's) is *prepared* before this replica's
first message to its topic: registered in ZooKeeper, then every binding that routes it
subscribed (activation.py explains the handshake). When the view says "unroutable", ZooKeeper
has the last word before a message goes to an alternate exchange or back as Basic.Return.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping

from gateway.amqp.errors import AMQPError
from gateway.backend.catalog import Catalog
from gateway.backend.interface import Message
from gateway.backend.pulsar.activation import lazy_exchange
from gateway.backend.pulsar.resources import PulsarResources
from gateway.model.arguments import is_stream
from gateway.model.entities import DEFAULT_EXCHANGE, Exchange, ExchangeType
from gateway.model.naming import topic_for
from gateway.model.routing import compile_topic
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
        # subscribe(topic, queue): the vhost's, which also adds the topic to its consumers.
        self._subscribe = subscribe
        #: (exchange, key) pairs prepared by this replica (not prepared again).
        self.prepared_keys: set[tuple[str, str]] = set()

    async def routes(self, exchange: Exchange, message: Message) -> bool:
        """Whether ``exchange`` routes ``message`` anywhere, as far as this replica knows
        (a topic exchange's new key is prepared first: its bindings are read from ZooKeeper)."""
        key = message.routing_key
        if (
            (exchange.name, key) not in self.prepared_keys
            and (exchange.type is ExchangeType.TOPIC or self._lazy_default_or_direct(exchange))
            and await self._prepare_key(exchange, key)
        ):
            return True
        return bool(self.catalog.routes(self.catalog.view, exchange, message))

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
        """Whether a binding of ``exchange`` that ZooKeeper has now routes ``key``. Headers
        bindings match on arguments, which this read leaves out: for them the view decides."""
        if exchange.type is ExchangeType.HEADERS:
            return False
        store = self._resources.store
        if exchange.name == DEFAULT_EXCHANGE:  # bound to every queue by its name
            found = await self.catalog.write(store.sync_queue(self.catalog.namespace, key))
            return found is not None
        bindings = await self.catalog.write(
            store.sync_bindings_of(self.catalog.namespace, exchange.name)
        )
        if exchange.type is ExchangeType.FANOUT:
            return bool(bindings)
        if exchange.type is ExchangeType.TOPIC:
            return any(compile_topic(pattern).matches(key) for _, pattern in bindings)
        return any(pattern == key for _, pattern in bindings)

    def _lazy_default_or_direct(self, exchange: Exchange) -> bool:
        return self._resources.lazy_subscriptions and lazy_exchange(exchange)

    async def _prepare_key(self, exchange: Exchange, key: str) -> bool:
        """A direct or topic exchange's key (or the default exchange's queue name) has its
        own topic: before this replica's first message to it, every binding that routes the
        key must have its subscription there. Returns whether one does (the view may not
        know it yet).

        The key is registered first (making the topic active, activation.py), then what it
        routes to is read from ZooKeeper, not from the view: a queue or binding made on
        another replica just before may not be in the view yet, and that replica, when it
        looked for the key after its write, did not see it (declare_queue and bind_queue do
        the mirror image). Whichever write is second sees the first, so the subscription
        exists before the message is written."""
        store, namespace = self._resources.store, self.catalog.namespace
        await self.catalog.write(store.register_topic_key(namespace, exchange.name, key))
        topic = topic_for(self.namespace, exchange.name, key)
        routed: list[str] = []
        if exchange.name == DEFAULT_EXCHANGE:
            found = await self.catalog.write(store.sync_queue(namespace, key))
            if found is not None and is_stream(found.arguments):
                # The topic is the stream's log itself: it needs no subscription.
                self.prepared_keys.add((exchange.name, key))
                return True
            if found is not None:
                routed.append(key)
        else:
            bindings = await self.catalog.write(store.sync_bindings_of(namespace, exchange.name))
            for queue, pattern in sorted(bindings):
                matches = (
                    pattern == key
                    if exchange.type is ExchangeType.DIRECT
                    else compile_topic(pattern).matches(key)
                )
                if matches:
                    routed.append(queue)
        for queue in routed:
            await self._subscribe(topic, queue)
        self.prepared_keys.add((exchange.name, key))
        return bool(routed)

    def forget_unregistered(self, keys: Mapping[str, frozenset[str]]) -> None:
        """A key the leader unregistered (its queue long gone, cleaner.py) is prepared again
        by the next publish: a queue declared since may be waiting for that handshake."""
        self.prepared_keys = {
            (exchange, key) for exchange, key in self.prepared_keys if key in keys.get(exchange, ())
        }
