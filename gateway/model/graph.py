"""Exchange-to-exchange bindings: routing through a graph of exchanges, RabbitMQ's way.

RabbitMQ routes with a worklist (``rabbit_exchange:route/3``): the exchange a message was
published to routes it with its bindings, to queues and to other exchanges; each exchange
reached routes it in turn, with the same routing key and headers; every exchange is visited at
most once, so cycles end; queues are collected in a set, so a queue reached by two paths gets
one copy; and an exchange whose own bindings match nothing passes the message on to its
``alternate-exchange`` (a missing one is skipped). ``RoutingGraph.route`` is that walk.

The gateway writes a message once, to the topic of the exchange it was published to, and a
queue reads the topics of every exchange from which a path of bindings leads to it: the graph
is *flattened* into each queue's set of topics (docs/mapping.md, "Exchange-to-exchange
bindings"). So:

* ``reach(source, key)`` is who may want a topic's messages: the queues a path of bindings
  leads to, with the topic's key (``None`` for a fanout or headers exchange's one topic, whose
  messages carry any key) and headers bindings read as matching. A queue subscribes to the
  topic when it is in that set.
* ``deliveries(source, key, headers)`` is who does want one message: the queues the walk from
  the topic's exchange reaches without alternate exchanges. A queue's consumer admits a
  message when it is in that set; ``filtered`` says when the answer depends on the message at
  all (otherwise every message of the topic is the queue's and nothing is evaluated).
* Alternate exchanges are decided when the message is published: ``route`` also returns the
  *writes*: the topic of the published-to exchange, plus one per alternate exchange that an
  exchange reached through a binding passed the message on to, each marked with the queues
  that already have the message from an earlier write (they skip that copy). Union of the
  writes' deliveries = RabbitMQ's queues, each queue once (``tests/unit/model/test_graph.py``
  checks it on random graphs against a literal transcription of RabbitMQ's worklist).

Pure: the caller supplies the exchanges, each exchange's queue bindings (a ``Router``) and the
exchange bindings, and caches the graph for as long as they do not change.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from gateway.amqp.fieldtable import Field
from gateway.model.entities import (
    DEFAULT_EXCHANGE,
    Binding,
    Exchange,
    ExchangeBinding,
    ExchangeType,
)
from gateway.model.routing import Router, compile_topic

__all__ = [
    "Route",
    "RouteSnapshot",
    "RoutingGraph",
    "Write",
    "binding_passes",
]

# A message's headers, or how to get them (decoded only if a headers exchange looks).
Headers = Mapping[str, Field] | None | Callable[[], Mapping[str, Field] | None]
# Routings per graph remembered by ``deliveries`` for sources without headers exchanges
# downstream (their answer depends on the routing key alone).
_DELIVERIES_CACHED: Final = 4096


def binding_passes(exchange_type: ExchangeType, binding_key: str, key: str | None) -> bool:
    """Whether a binding of an exchange of ``exchange_type`` may route a message with routing
    key ``key`` (``None``: any key), reading headers bindings as matching (their arguments
    are evaluated on delivery)."""
    if key is None or exchange_type is ExchangeType.FANOUT or exchange_type is ExchangeType.HEADERS:
        return True
    if exchange_type is ExchangeType.DIRECT:
        return binding_key == key
    return compile_topic(binding_key).matches(key)


@dataclass(frozen=True, slots=True)
class Write:
    """One write of a published message: to ``exchange``'s topic; the queues in ``skip``
    have it from an earlier write of the same publish."""

    exchange: Exchange
    skip: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Route:
    """Where a message goes: RabbitMQ's set of ``queues``, the ``writes`` that get it there,
    and the exchanges that matched nothing and passed it on to their alternate exchange
    (``alternates_taken``, in the order taken)."""

    queues: frozenset[str]
    writes: tuple[Write, ...]
    alternates_taken: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RouteSnapshot:
    """The part of a graph between one exchange and one queue: the exchanges on the paths
    (their names and types), the queue's bindings to them and the exchange bindings between
    them. Kept with a draining subscription so that what was routed before an unbind is
    still judged by the bindings that routed it."""

    exchanges: tuple[Exchange, ...] = ()
    bindings: tuple[Binding, ...] = ()
    exchange_bindings: tuple[ExchangeBinding, ...] = ()

    def graph(self) -> RoutingGraph:
        exchanges = {exchange.name: exchange for exchange in self.exchanges}
        routers: dict[str, Router] = {}

        def router(exchange: Exchange) -> Router:
            found = routers.get(exchange.name)
            if found is None:
                bound = [b for b in self.bindings if b.exchange == exchange.name]
                found = routers[exchange.name] = Router(exchange.type, bound)
            return found

        return RoutingGraph(exchanges.get, router, self.exchange_bindings)


@dataclass(eq=False, slots=True)
class _Walk:
    visited: set[str] = field(default_factory=set)
    queues: set[str] = field(default_factory=set)
    # Exchanges whose own bindings matched nothing, in the order visited.
    unmatched: list[Exchange] = field(default_factory=list)


class RoutingGraph:
    """The exchanges of one vhost with their bindings to queues and to each other."""

    __slots__ = (
        "_deliveries",
        "_edge_routers",
        "_exchange",
        "_headers_below",
        "_incoming",
        "_outgoing",
        "_queues",
        "_reach",
        "_router",
    )

    def __init__(
        self,
        exchange: Callable[[str], Exchange | None],
        router: Callable[[Exchange], Router],
        exchange_bindings: Iterable[ExchangeBinding],
        queues: Collection[str] = (),
    ) -> None:
        # exchange(name): the exchange, or None; router(exchange): its queue bindings;
        # queues: the vhost's queues (the default exchange's implicit bindings).
        self._exchange = exchange
        self._router = router
        self._queues = queues
        self._outgoing: dict[str, list[ExchangeBinding]] = {}
        self._incoming: dict[str, set[str]] = {}
        for binding in exchange_bindings:
            self._outgoing.setdefault(binding.source, []).append(binding)
            self._incoming.setdefault(binding.destination, set()).add(binding.source)
        self._edge_routers: dict[str, Router] = {}
        self._reach: dict[tuple[str, str | None], frozenset[str]] = {}
        self._deliveries: dict[tuple[str, str], frozenset[str]] = {}
        self._headers_below: dict[str, bool] = {}

    # ------------------------------------------------------------------ one exchange

    def has_exchange_bindings(self, name: str) -> bool:
        """Whether exchange ``name`` is the source of an exchange binding."""
        return name in self._outgoing

    def exchange_bindings_of(self, name: str) -> list[ExchangeBinding]:
        """The exchange bindings whose source is ``name``."""
        return list(self._outgoing.get(name, ()))

    def _edges(self, exchange: Exchange) -> Router | None:
        """``exchange``'s exchange bindings as a Router whose "queues" are destinations."""
        outgoing = self._outgoing.get(exchange.name)
        if outgoing is None:
            return None
        router = self._edge_routers.get(exchange.name)
        if router is None:
            router = self._edge_routers[exchange.name] = Router(
                exchange.type,
                [Binding(b.destination, b.source, b.routing_key, b.arguments) for b in outgoing],
            )
        return router

    def matches(self, exchange: Exchange, key: str, headers: Headers) -> tuple[set[str], set[str]]:
        """The queues and the exchanges (names) ``exchange``'s own bindings route to."""
        if exchange.name == DEFAULT_EXCHANGE:
            return ({key} if key in self._queues else set()), set()
        table = None
        if exchange.type is ExchangeType.HEADERS:
            table = headers() if callable(headers) else headers
        queues = self._router(exchange).route(key, table)
        edges = self._edges(exchange)
        return queues, (set() if edges is None else edges.route(key, table))

    def _passable(self, exchange: Exchange, key: str | None) -> tuple[set[str], set[str]]:
        """What ``exchange``'s bindings may route a message with ``key`` to (``None``: any
        key), headers bindings read as matching."""
        if exchange.name == DEFAULT_EXCHANGE:
            return ({key} if key is not None and key in self._queues else set()), set()
        keyed = exchange.type is ExchangeType.DIRECT or exchange.type is ExchangeType.TOPIC
        router = self._router(exchange)
        edges = self._edges(exchange)
        if keyed and key is not None:
            return router.route(key), (set() if edges is None else edges.route(key))
        queues = {binding.queue for binding in router.bindings}
        return queues, (set() if edges is None else {b.queue for b in edges.bindings})

    # ------------------------------------------------------------------ the walk

    def _walk(
        self,
        root: Exchange,
        key: str,
        headers: Headers,
        walk: _Walk,
        matching: Collection[str] = (),
    ) -> set[str]:
        """Visit every exchange the bindings lead to from ``root`` (not visited yet) with
        this message; returns the queues reached. ``matching``: exchanges to take as
        matching even if their bindings here do not (ZooKeeper says they do)."""
        queues: set[str] = set()
        walk.visited.add(root.name)
        stack = [root]
        while stack:
            exchange = stack.pop()
            found, destinations = self.matches(exchange, key, headers)
            queues |= found
            if not found and not destinations and exchange.name not in matching:
                walk.unmatched.append(exchange)
            for name in sorted(destinations, reverse=True):
                if name in walk.visited:
                    continue
                walk.visited.add(name)
                target = self._exchange(name)
                if target is not None:
                    stack.append(target)
        walk.queues |= queues
        return queues

    def route(
        self,
        exchange: Exchange,
        key: str,
        headers: Headers,
        *,
        alternate: Callable[[Exchange], Exchange | None],
        matching: Collection[str] = (),
    ) -> Route:
        """RabbitMQ's routing of a message published to ``exchange``, and the writes that
        make it so. ``alternate(x)``: x's alternate exchange, if it exists.

        The writes: the exchange reached first (the published-to one, unless it matched
        nothing and has an alternate exchange, which then takes its place, as before exchange
        bindings), then each alternate exchange that an exchange passed the message on to and
        that no earlier write's paths reach; each skips the queues of the writes before it.
        An exchange that routes nothing and has no alternate is still written to when it is
        the first: a binding made on another replica a moment ago may want the message."""
        walk = _Walk()
        writes: list[Write] = []
        taken: list[str] = []
        roots: deque[Exchange] = deque([exchange])
        while roots:
            root = roots.popleft()
            if root.name in walk.visited:
                continue
            covered = frozenset(walk.queues)
            walk.unmatched = []
            self._walk(root, key, headers, walk, matching)
            passed_on = False
            for unmatched in walk.unmatched:
                target = alternate(unmatched)
                if target is None or target.name in walk.visited:
                    continue
                taken.append(unmatched.name)
                roots.append(target)
                passed_on = passed_on or unmatched.name == root.name
            if not passed_on:
                writes.append(Write(root, covered))
        return Route(frozenset(walk.queues), tuple(writes), tuple(taken))

    def deliveries(self, source: Exchange, key: str, headers: Headers) -> frozenset[str]:
        """The queues a message on ``source``'s topic is for: where its bindings lead, with
        no alternate exchange (those were decided when it was published)."""
        cacheable = not self._headers_downstream(source)
        if cacheable:
            cached = self._deliveries.get((source.name, key))
            if cached is not None:
                return cached
        found = frozenset(self._walk(source, key, headers, _Walk()))
        if cacheable:
            if len(self._deliveries) >= _DELIVERIES_CACHED:
                self._deliveries.clear()
            self._deliveries[(source.name, key)] = found
        return found

    # ------------------------------------------------------------------ flattening

    def reach(self, source: Exchange, key: str | None) -> frozenset[str]:
        """The queues that messages on ``source``'s topic for ``key`` may be for (``None``:
        the one topic of a fanout or headers exchange): the topic's subscriptions."""
        cached = self._reach.get((source.name, key))
        if cached is not None:
            return cached
        queues: set[str] = set()
        seen = {source.name}
        stack = [source]
        while stack:
            exchange = stack.pop()
            found, destinations = self._passable(exchange, key)
            queues |= found
            for name in destinations - seen:
                seen.add(name)
                target = self._exchange(name)
                if target is not None:
                    stack.append(target)
        result = self._reach[(source.name, key)] = frozenset(queues)
        return result

    def downstream(self, source: str) -> set[str]:
        """The exchanges that exchange bindings lead to from ``source`` (itself included)."""
        found = {source}
        stack = [source]
        while stack:
            for binding in self._outgoing.get(stack.pop(), ()):
                if binding.destination not in found:
                    found.add(binding.destination)
                    stack.append(binding.destination)
        return found

    def upstream(self, names: Iterable[str]) -> set[str]:
        """The exchanges from which exchange bindings lead to any of ``names`` (those
        included)."""
        found = set(names)
        stack = list(found)
        while stack:
            for source in self._incoming.get(stack.pop(), ()):
                if source not in found:
                    found.add(source)
                    stack.append(source)
        return found

    def literal_keys(self, source: Exchange) -> set[str]:
        """The routing keys that ``source``'s bindings name one by one (a direct exchange's
        keys, a topic exchange's keys without wildcards): their topics exist for a binding
        whether or not anybody published there yet."""
        if source.type is not ExchangeType.DIRECT and source.type is not ExchangeType.TOPIC:
            return set()
        keys = {b.routing_key for b in self._router(source).bindings}
        keys.update(b.routing_key for b in self._outgoing.get(source.name, ()))
        if source.type is ExchangeType.TOPIC:
            keys = {key for key in keys if compile_topic(key).shape == "literal"}
        return keys

    def path_exchanges(self, source: Exchange, bound_to: Iterable[str]) -> list[Exchange]:
        """The exchanges on the paths from ``source`` to a queue bound to ``bound_to``."""
        below = self.downstream(source.name)
        above = self.upstream(bound_to)
        on_path = []
        for name in sorted(below & above):
            exchange = self._exchange(name)
            if exchange is not None:
                on_path.append(exchange)
        return on_path

    def filtered(self, source: Exchange, bound_to: Iterable[str], *, keyed: bool) -> bool:
        """Whether a queue bound to ``bound_to`` must look at each message on ``source``'s
        topic (``keyed``: a topic of one routing key): yes when a headers exchange is on the
        way, or, on an unkeyed topic, a direct or topic exchange."""
        for exchange in self.path_exchanges(source, bound_to):
            if exchange.type is ExchangeType.HEADERS:
                return True
            if not keyed and exchange.type is not ExchangeType.FANOUT:
                return True
        return False

    def snapshot(self, source: Exchange, queue: str, bound_to: Iterable[str]) -> RouteSnapshot:
        """The paths from ``source`` to ``queue`` (bound to ``bound_to``), to be kept."""
        exchanges = self.path_exchanges(source, bound_to)
        names = {exchange.name for exchange in exchanges}
        bindings = sorted(
            (
                binding
                for exchange in exchanges
                for binding in self._router(exchange).bindings
                if binding.queue == queue
            ),
            key=_binding_order,
        )
        edges = sorted(
            (
                binding
                for name in names
                for binding in self._outgoing.get(name, ())
                if binding.destination in names
            ),
            key=_edge_order,
        )
        return RouteSnapshot(
            tuple(Exchange(e.name, e.type) for e in exchanges), tuple(bindings), tuple(edges)
        )

    def _headers_downstream(self, source: Exchange) -> bool:
        """Whether a headers exchange is among those ``source`` leads to (then a message's
        deliveries depend on its headers, not just its key)."""
        known = self._headers_below.get(source.name)
        if known is None:
            known = self._headers_below[source.name] = any(
                exchange is not None and exchange.type is ExchangeType.HEADERS
                for exchange in map(self._exchange, self.downstream(source.name))
            )
        return known


def _binding_order(binding: Binding) -> tuple[str, str, str]:
    return (binding.exchange, binding.routing_key, repr(sorted(binding.arguments.items())))


def _edge_order(binding: ExchangeBinding) -> tuple[str, str, str, str]:
    return (
        binding.source,
        binding.destination,
        binding.routing_key,
        repr(sorted(binding.arguments.items())),
    )
