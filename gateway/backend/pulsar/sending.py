"""Writing a published message: where it goes, and the Pulsar writes that take it there.

A message is written to the topic of the exchange it was published to (with its routing key
for a direct or topic exchange), or, if that exchange routes nothing, to the topic of its
alternate exchange (and on, each exchange once). It keeps the exchange and routing key it was
published with (Basic.Deliver names them, as on RabbitMQ). The queues read those topics.

With exchange bindings in the vhost, RabbitMQ's whole walk decides (model/graph.py ``route``):
still one write, to the published-to exchange's topic (queues reached through exchange
bindings read it), plus one per alternate exchange that an exchange reached on the way passed
the message on to; such a copy is marked with the queues that have the message already
(``amqp-refused-by``: their consumers skip it), so that no queue gets two. Before a message
goes to an alternate exchange, ZooKeeper says whether the exchange that routes nothing in this
replica's view has a binding made elsewhere a moment ago.
"""

from __future__ import annotations

import json
from collections.abc import Set as AbstractSet

from gateway.backend.catalog import Catalog
from gateway.backend.interface import Message, PublishOutcome, Stored
from gateway.backend.overflow import RefusedStored
from gateway.backend.pulsar.length_limit import LengthLimits
from gateway.backend.pulsar.message_ttl import now_ms
from gateway.backend.pulsar.messages import ENQUEUED, REFUSED_BY, to_pulsar
from gateway.backend.pulsar.publish_routes import PublishRoutes
from gateway.backend.pulsar.reply_codes import to_amqp_error
from gateway.backend.pulsar.resources import PulsarResources
from gateway.bounded import remember
from gateway.metadata.store import VhostView
from gateway.model.entities import Exchange, ExchangeType
from gateway.model.graph import Route
from gateway.model.routing import publish_topic
from gateway.model.vhost import Namespace
from gateway.pulsar.errors import PulsarClientError

__all__ = ["AllStored", "Sending"]

_PUBLISH_TOPICS_CACHED = 4096


def _enqueued(properties: dict[str, str], arrived: int | None) -> dict[str, str]:
    """``properties``, with the time the message ``arrived`` (ms) if it waited for its key
    to be prepared. A queue's message TTL runs from Pulsar's publish time (message_ttl.py),
    but RabbitMQ's runs from the enqueue; the first message to a new key waits ~70-100 ms
    for Pulsar to create its queues' subscriptions (docs/performance.md), so it would live
    that much longer (amqp091-go's TestRabbitMQQueueTTLGet: a 100 ms TTL, a Get after
    200 ms found it)."""
    if arrived is not None:
        properties[ENQUEUED] = str(arrived)
    return properties


class AllStored:
    """``Stored`` of a message written to several topics: durable once every write is."""

    def __init__(self, parts: list[Stored]) -> None:
        self._parts = parts

    def done(self) -> bool:
        return all(part.done() for part in self._parts)

    async def durable(self) -> None:
        for part in self._parts:
            await part.durable()


class Sending:
    """One vhost's publishes: routing decisions (publish_routes.py) and writes."""

    def __init__(
        self,
        catalog: Catalog,
        namespace: Namespace,
        resources: PulsarResources,
        routes: PublishRoutes,
        limits: LengthLimits,
    ) -> None:
        self._catalog = catalog
        self._namespace = namespace
        self._r = resources
        self._routes = routes
        self._limits = limits
        # (exchange type, exchange, routing key) -> the topic its messages go to (naming it
        # per message was ~2% of the publish path).
        self._publish_topics: dict[tuple[ExchangeType, str, str], str] = {}
        # (exchange, key) -> the topic ``send_now`` writes to, for what it decided it may
        # write at once (``_sendable``). The decision depends on the view and on the keys
        # prepared, so it is kept for one view and one set of prepared keys (a view is
        # replaced at every metadata change; the leader's sweep replaces the set): deciding
        # per message was ~8 of the publish path's ~40 Python calls.
        self._sendable: dict[tuple[str, str], str] = {}
        self._sendable_in: tuple[VhostView | None, AbstractSet[tuple[str, str]]] = (None, set())

    def _topic(self, exchange: Exchange, key: str) -> str:
        named = (exchange.type, exchange.name, key)
        topic = self._publish_topics.get(named)
        if topic is None:
            topic = publish_topic(self._namespace, exchange, key)
            remember(self._publish_topics, named, topic, _PUBLISH_TOPICS_CACHED)
        return topic

    async def send(
        self,
        exchange: Exchange,
        message: Message,
        *,
        mandatory: bool = False,
        view: VhostView | None = None,
    ) -> PublishOutcome:
        """Route ``message`` through ``exchange`` (and its alternates) and write it
        (``view``: the caller's, if it has one at hand)."""
        if (view or self._view).exchange_bindings:
            return await self._send_through_bindings(exchange, message, mandatory=mandatory)
        published = exchange
        key = message.routing_key
        routes = self._routes
        arrived = now_ms() if routes.unprepared(exchange, key) else None
        routed = await routes.routes(exchange, message)
        seen = {exchange.name}
        while not routed:
            # Unroutable here: RabbitMQ sends it on to the exchange's alternate exchange, and
            # that one's, until one routes it (rabbit_exchange:route, each exchange once).
            alternate = await routes.alternate(exchange)
            if alternate is None or alternate.name in seen:
                break
            # The view said unroutable; a binding made on another replica a moment ago may
            # not be in it yet: ZooKeeper decides before the message goes elsewhere.
            if await routes.bound_in_zookeeper(exchange, key):
                routed = True
                break
            exchange = alternate
            seen.add(exchange.name)
            routed = await routes.routes(exchange, message)
        if not routed and mandatory:
            # About to tell the client "unroutable": a binding made on another replica a
            # moment ago may not be in the view yet (the rare, slow path of a mandatory miss).
            routed = await routes.routes_in_zookeeper(published, key)
        # Written even when this replica's view routes it nowhere: a binding made on another
        # replica may not have reached the view yet, and Pulsar drops a message that no
        # subscription wants anyway.
        topic = self._topic(exchange, key)
        properties = _enqueued(to_pulsar(message), arrived)
        refused = await self._refusals(exchange, message) if self._limits.of(self._view) else []
        if refused:
            # Full queues with x-overflow reject-publish: the others still get the message.
            if set(refused) >= self._catalog.routes(self._view, exchange, message):
                return PublishOutcome(routed=True, stored=RefusedStored(refused))
            properties[REFUSED_BY] = json.dumps(refused)
        try:
            stored = await self._r.producers.submit(topic, message.body, properties)
        except PulsarClientError as error:
            raise to_amqp_error(error, f"publishing to {topic}") from None
        if refused:
            return PublishOutcome(routed=True, stored=RefusedStored(refused, stored))
        return PublishOutcome(routed=routed, stored=stored)

    def send_now(self, exchange: Exchange, message: Message, view: VhostView) -> Stored | None:
        """``send`` in the common case, without waiting: a message the view routes, no
        exchange bindings or length limits in the vhost, a producer with room; its write
        (routed: the view routes it). None, with nothing done, for everything else (``send``
        then decides)."""
        prepared = self._routes.prepared_keys
        if self._sendable_in[0] is not view or self._sendable_in[1] is not prepared:
            self._sendable.clear()
            self._sendable_in = (view, prepared)
        named = (exchange.name, message.routing_key)
        topic = self._sendable.get(named)
        if topic is None:
            topic = self._sendable_topic(exchange, message, view)
            if topic is None:
                return None
            if exchange.type is not ExchangeType.HEADERS:  # routed by each message's headers
                remember(self._sendable, named, topic, _PUBLISH_TOPICS_CACHED)
        return self._r.producers.submit_now(topic, message.body, to_pulsar(message))

    def _sendable_topic(self, exchange: Exchange, message: Message, view: VhostView) -> str | None:
        """The topic ``send_now`` may write ``message`` to at once, or None when ``send``
        has to decide: exchange bindings or length limits in the vhost, a key to prepare, or
        unroutable in this view (alternate exchanges, ZooKeeper)."""
        if view.exchange_bindings or self._limits.of(view):
            return None
        if not self._routes.routes_now(exchange, message, view):
            return None
        return self._topic(exchange, message.routing_key)

    @property
    def _view(self) -> VhostView:
        return self._catalog.view

    async def _refusals(self, exchange: Exchange, message: Message) -> list[str]:
        """The routed queues whose reject-publish length limit refuses ``message``."""
        view = self._view
        targets = self._catalog.routes(view, exchange, message)
        return await self._limits.refusing(self._limits.of(view), targets, message)

    async def _route(self, exchange: Exchange, message: Message) -> Route:
        """RabbitMQ's walk in this replica's view, each alternate exchange it takes checked
        against ZooKeeper first (the exchange that routes nothing here may have a binding
        made elsewhere a moment ago)."""
        key = message.routing_key
        matching: set[str] = set()
        checked: set[str] = set()
        while True:
            view = self._view
            route = self._catalog.route(view, exchange, message, matching=matching)
            unchecked = [name for name in route.alternates_taken if name not in checked]
            if not unchecked:
                return route
            checked.add(unchecked[0])
            passing = self._catalog.exchange(view, unchecked[0])
            if passing is not None and await self._routes.bound_in_zookeeper(passing, key):
                matching.add(passing.name)

    async def _send_through_bindings(
        self, exchange: Exchange, message: Message, *, mandatory: bool
    ) -> PublishOutcome:
        key = message.routing_key
        arrived = now_ms() if self._routes.unprepared(exchange, key) else None
        # The published-to exchange's key first (its first use registers it and subscribes
        # where ZooKeeper says it leads: zk_graph.py), then every other topic written to.
        await self._routes.prepare(exchange, key)
        route = await self._route(exchange, message)
        for write in route.writes:
            await self._routes.prepare(write.exchange, key)
        routed = bool(route.queues)
        if not routed and mandatory:
            routed = await self._routes.routes_in_zookeeper(exchange, key)
        limits = self._limits.of(self._view)
        refused = await self._limits.refusing(limits, route.queues, message) if limits else []
        if refused and set(refused) >= route.queues:
            return PublishOutcome(routed=True, stored=RefusedStored(refused))
        parts: list[Stored] = []
        for write in route.writes:
            topic = self._topic(write.exchange, key)
            properties = _enqueued(to_pulsar(message), arrived)
            skip = write.skip | set(refused)
            if skip:
                properties[REFUSED_BY] = json.dumps(sorted(skip))
            try:
                parts.append(await self._r.producers.submit(topic, message.body, properties))
            except PulsarClientError as error:
                raise to_amqp_error(error, f"publishing to {topic}") from None
        stored: Stored = parts[0] if len(parts) == 1 else AllStored(parts)
        if refused:
            return PublishOutcome(routed=True, stored=RefusedStored(refused, stored))
        return PublishOutcome(routed=routed, stored=stored)
