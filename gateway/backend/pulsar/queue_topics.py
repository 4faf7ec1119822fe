"""Which topics a queue reads, from a vhost's view of the metadata (no I/O).

A queue reads the default exchange's topic named after it (not a stream: that topic is the
stream's log, read by readers, streams.py), the topics its bindings cover
(routing.py's ``binding_topics``; a lazy topic only once somebody published to its key,
activation.py), and topics it was unbound from while their subscription still drains
(drains.py). The vhost subscribes, counts and reconciles consumers with these sets; the
leader's cleaner asks which subscriptions are still needed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from gateway.backend.catalog import Catalog
from gateway.backend.pulsar.activation import Activation, activation_for, default_activation
from gateway.metadata.store import VhostView
from gateway.model.arguments import is_stream
from gateway.model.entities import DEFAULT_EXCHANGE, Binding
from gateway.model.naming import topic_for
from gateway.model.routing import binding_topics
from gateway.model.vhost import Namespace


class QueueTopics:
    """The topic sets of one vhost's queues."""

    def __init__(self, catalog: Catalog, namespace: Namespace, *, lazy_subscriptions: bool) -> None:
        self.catalog = catalog
        self.namespace = namespace
        self._lazy_subscriptions = lazy_subscriptions
        #: ``persistent://tenant/namespace/``: records name topics without it.
        self.prefix = f"persistent://{namespace.tenant}/{namespace.namespace}/"

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
        if exchange is None:
            return []
        topics = self.of_binding(view, binding)
        if self.active(view, activation_for(exchange, binding.routing_key)):
            return topics
        return []

    def bound(
        self, view: VhostView, queue: str, without: Iterable[Binding] = (), *, live: bool = True
    ) -> set[str]:
        """The topics the queue's bindings (and the default exchange) route into, leaving
        out the bindings ``without`` (about to be removed). ``live``: only those with a
        subscription (activation.py); otherwise also the lazy ones nobody published to."""
        leaving = set(without)
        topics: set[str] = set()
        entity = view.queues.get(queue)
        if (entity is None or not is_stream(entity.arguments)) and (
            not live or self.active(view, default_activation(queue))
        ):
            topics.add(topic_for(self.namespace, DEFAULT_EXCHANGE, queue))
        covered = self.live_of_binding if live else self.of_binding
        for binding in self.bindings_of(view, queue):
            if binding not in leaving:
                topics.update(covered(view, binding))
        return topics

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
