"""Which topics a queue reads, from a vhost's view of the metadata (no I/O).

A queue reads the default exchange's topic named after it (not a stream: that topic is the
stream's log, read by readers, queue_types/stream/queues.py), the topics its bindings cover
(routing.py's ``binding_topics``; a lazy topic only once somebody published to its key,
activation.py), the topics of the exchanges from which exchange bindings lead to the
exchanges it is bound to (the graph *flattened*: model/graph.py), and topics it was unbound
from while their subscription still drains (drains.py). The vhost subscribes, counts and
reconciles consumers with these sets; the leader's cleaner asks which subscriptions are still
needed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Iterator, Mapping
from types import MappingProxyType

from gateway.backend.catalog import Catalog
from gateway.backend.pulsar.activation import Activation, activation_for, default_activation
from gateway.backend.pulsar.queue_types.dispatch import keeps_log
from gateway.metadata.store import VhostView
from gateway.model.entities import DEFAULT_EXCHANGE, Binding, Exchange, ExchangeBinding
from gateway.model.graph import RoutingGraph
from gateway.model.naming import topic_for
from gateway.model.routing import binding_topics
from gateway.model.vhost import Namespace


def changed_view(
    view: VhostView,
    *,
    removed: Iterable[Binding | ExchangeBinding] = (),
    added: Iterable[Binding | ExchangeBinding] = (),
    deleted_exchange: str | None = None,
) -> VhostView:
    """``view`` as it would be after a change (for the topic sets before and after it). Its
    version is -1: caches keyed by version must not keep it."""
    gone = set(removed)
    new = set(added)
    exchanges = view.exchanges
    bindings = view.bindings - gone | {b for b in new if isinstance(b, Binding)}
    edges = view.exchange_bindings - gone | {b for b in new if isinstance(b, ExchangeBinding)}
    if deleted_exchange is not None:
        exchanges = MappingProxyType({n: e for n, e in exchanges.items() if n != deleted_exchange})
        gone |= {b for b in bindings if b.exchange == deleted_exchange}
        bindings = frozenset(b for b in bindings if b.exchange != deleted_exchange)
        edges = frozenset(e for e in edges if deleted_exchange not in (e.source, e.destination))
    changed = {b.queue for b in (*gone, *new) if isinstance(b, Binding)}
    overrides = {q: frozenset(b for b in bindings if b.queue == q) for q in changed}
    return dataclasses.replace(
        view,
        version=-1,
        exchanges=exchanges,
        bindings=bindings,
        queue_bindings=_Overlay(view.queue_bindings, overrides),
        exchange_bindings=edges,
    )


class _Overlay(Mapping[str, Collection[Binding]]):
    """A queue -> bindings map with some queues' sets replaced (empty: none), without a copy
    of the rest."""

    def __init__(
        self, base: Mapping[str, Collection[Binding]], overrides: Mapping[str, frozenset[Binding]]
    ) -> None:
        self._base = base
        self._overrides = overrides

    def __getitem__(self, queue: str) -> Collection[Binding]:
        found = self._overrides[queue] if queue in self._overrides else self._base[queue]
        if not found:
            raise KeyError(queue)
        return found

    def __iter__(self) -> Iterator[str]:
        for queue in self._base:
            if self._overrides.get(queue, True):
                yield queue
        for queue, found in self._overrides.items():
            if found and queue not in self._base:
                yield queue

    def __len__(self) -> int:
        return sum(1 for _ in self)


def source_topics(
    namespace: Namespace, graph: RoutingGraph, source: Exchange, keys: Iterable[str]
) -> dict[str, frozenset[str]]:
    """The topics of ``source`` (a keyed exchange's for each of ``keys``) with the queues
    that may want their messages (``RoutingGraph.reach``)."""
    if source.type.keyed:
        return {topic_for(namespace, source.name, k): graph.reach(source, k) for k in keys}
    return {topic_for(namespace, source.name, None): graph.reach(source, None)}


def _differ(first: object, second: object) -> bool:
    return first is not second


class QueueTopics:
    """The topic sets of one vhost's queues."""

    def __init__(self, catalog: Catalog, namespace: Namespace, *, lazy_subscriptions: bool) -> None:
        self.catalog = catalog
        self.namespace = namespace
        self._lazy_subscriptions = lazy_subscriptions
        #: ``persistent://tenant/namespace/``: records name topics without it.
        self.prefix = f"persistent://{namespace.tenant}/{namespace.namespace}/"
        # The flattened topics of each queue (and liveness), for the view's parts they were
        # computed from (compared by identity: the view keeps a part's object until it
        # changes).
        self._flat_source: tuple[object, ...] = ()
        self._flat: dict[tuple[str, bool], frozenset[str]] = {}

    def of_binding(self, view: VhostView, binding: Binding) -> list[str]:
        """Every topic ``binding`` covers, lazy ones nobody published to included."""
        exchange = self.catalog.exchange(view, binding.exchange)
        if exchange is None:
            return []
        keys = view.topic_keys.get(binding.exchange, frozenset())
        return binding_topics(self.namespace, exchange, binding, keys)

    def active(self, view: VhostView, activation: Activation | None) -> bool:
        """Whether the view knows ``activation``'s key registered (None, or subscriptions
        made at declare and bind (``amqpLazySubscriptions=false``): always subscribed)."""
        if activation is None or not self._lazy_subscriptions:
            return True
        return activation.routing_key in view.topic_keys.get(activation.exchange, ())

    def live_of_binding(self, view: VhostView, binding: Binding) -> list[str]:
        """The topics of ``binding`` that have a subscription (or are about to): those of
        ``of_binding`` less a lazy topic whose key nobody has published to yet."""
        exchange = self.catalog.exchange(view, binding.exchange)
        if exchange is None or not self.active(view, activation_for(exchange, binding.routing_key)):
            return []  # asked first: most lazy bindings have no subscription, and it is cheaper
        return self.of_binding(view, binding)

    def bound(
        self, view: VhostView, queue: str, without: Iterable[Binding] = (), *, live: bool = True
    ) -> set[str]:
        """The topics the queue's bindings (and the default exchange) route into, leaving
        out the bindings ``without`` (about to be removed). ``live``: only those with a
        subscription (activation.py); otherwise also the lazy ones nobody published to."""
        leaving = set(without)
        topics: set[str] = set()
        entity = view.queues.get(queue)
        if not keeps_log(entity) and (not live or self.active(view, default_activation(queue))):
            topics.add(topic_for(self.namespace, DEFAULT_EXCHANGE, queue))
        covered = self.live_of_binding if live else self.of_binding
        for binding in self.bindings_of(view, queue):
            if binding not in leaving:
                topics.update(covered(view, binding))
        if view.exchange_bindings:
            topics |= self.flattened(view, queue, live=live)
        return topics

    def flattened(self, view: VhostView, queue: str, *, live: bool = True) -> frozenset[str]:
        """The topics that reach ``queue`` through exchange bindings: those of every exchange
        with an exchange binding on a path to an exchange the queue is bound to, each keyed
        topic for the keys that a path lets through (registered keys; with ``live`` False or
        subscriptions made at bind, also the keys bindings name one by one)."""
        parts = (view.exchanges, view.bindings, view.exchange_bindings, view.topic_keys)
        known = self._flat_source
        if view.version < 0 or len(known) != len(parts) or any(map(_differ, parts, known)):
            self._flat = {}
            self._flat_source = parts if view.version >= 0 else ()
        cached = self._flat.get((queue, live))
        if cached is not None:
            return cached
        graph = self.catalog.graph(view)
        topics: set[str] = set()
        bound_to = {binding.exchange for binding in self.bindings_of(view, queue)}
        for name in graph.upstream(bound_to):
            source = self.catalog.exchange(view, name)
            if source is None or not graph.has_exchange_bindings(name):
                continue
            keys: set[str] = set(view.topic_keys.get(name, ()))
            if not live or not self._lazy_subscriptions:
                keys |= graph.literal_keys(source)
            for topic, queues in source_topics(self.namespace, graph, source, keys).items():
                if queue in queues:
                    topics.add(topic)
        found = self._flat[(queue, live)] = frozenset(topics)
        return found

    def fed_through_exchanges(self, view: VhostView) -> set[tuple[str, str]]:
        """(queue, topic) of every live topic that reaches a queue through exchange
        bindings (for the reconciler)."""
        if not view.exchange_bindings:
            return set()
        graph = self.catalog.graph(view)
        queues = {
            q
            for name in {b.source for b in view.exchange_bindings}
            if (exchange := self.catalog.exchange(view, name)) is not None
            for q in graph.reach(exchange, None)
        }
        return {(q, topic) for q in queues for topic in self.flattened(view, q)}

    def affected(self, view: VhostView, exchanges: Collection[str]) -> set[str]:
        """The queues that exchange bindings or queue bindings lead to from ``exchanges``."""
        graph = self.catalog.graph(view)
        queues: set[str] = set()
        for name in exchanges:
            exchange = self.catalog.exchange(view, name)
            if exchange is not None:
                queues |= graph.reach(exchange, None)
        return queues

    def bindings_of(self, view: VhostView, queue: str) -> Collection[Binding]:
        """``queue``'s bindings in ``view`` (the view keeps them by queue: no scan of every
        binding per call, the queue statistics ask for every queue)."""
        return view.queue_bindings.get(queue, ())

    def draining(self, view: VhostView, queue: str) -> set[str]:
        return {
            self.prefix + topic
            for (name, topic), record in view.drains.items()
            if name == queue and not record.removing
        }

    def read_by(self, view: VhostView, queue: str) -> set[str]:
        """Every topic the queue reads: bound ones, and unbound ones still draining."""
        return self.bound(view, queue) | self.draining(view, queue)

    def needs(self, view: VhostView, queue: str, topic: str) -> bool:
        """Whether ``queue`` exists and reads, or may read, ``topic`` in ``view`` (bound,
        active or not, or draining)."""
        return queue in view.queues and (
            topic in self.bound(view, queue, live=False) or topic in self.draining(view, queue)
        )

    def default_topic(self, queue: str) -> str:
        """The queue's own topic, the default exchange's."""
        return topic_for(self.namespace, DEFAULT_EXCHANGE, queue)

    def full_name(self, local_name: str) -> str:
        """The full name of a topic of this namespace (records name topics locally)."""
        return self.prefix + local_name

    @staticmethod
    def local(topic: str) -> str:
        """A topic's name within its namespace (as records name it)."""
        return topic.rsplit("/", 1)[-1]
