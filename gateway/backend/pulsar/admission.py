"""Which of a topic's messages are a queue's: the filter its consumers apply on delivery.

A queue's subscription on a topic receives every message written there; most are the
queue's, some are not:

* written while the queue was not bound to the topic (drains.py: excluded by position);
* prefetched before a purge (dropped once, unless a client holds it);
* on a headers exchange's topic, or on a topic that reaches the queue through exchange
  bindings (model/graph.py), messages its bindings do not route to it: judged message by
  message by the walk from the topic's exchange (``RoutingGraph.deliveries``), or, for what
  was routed before an unbind, by the bindings that routed it (``DrainRecord.via``).

A message that is not the queue's is acknowledged for the queue and never delivered. In a
vhost without exchange bindings the cost is what it was: keyed topics and fanout exchanges'
topics admit everything at once.
"""

from __future__ import annotations

from gateway.backend.catalog import Catalog
from gateway.backend.interface import Message
from gateway.backend.pulsar.delivery import Admits, exchange_and_key
from gateway.backend.pulsar.drains import Drains, position_of
from gateway.backend.pulsar.queue_topics import QueueTopics
from gateway.backend.pulsar.redeliveries import Redeliveries
from gateway.metadata.store import Position, VhostView
from gateway.model.entities import Exchange, ExchangeType
from gateway.model.graph import RouteSnapshot, RoutingGraph
from gateway.model.routing import headers_match
from gateway.pulsar.received import ReceivedMessage

__all__ = ["Admission"]

# Snapshots kept by drain records, as graphs (they are judged by per message).
_SNAPSHOT_GRAPHS = 256


class Admission:
    """The delivery filters of one vhost's queues."""

    def __init__(
        self,
        catalog: Catalog,
        topics: QueueTopics,
        drains: Drains,
        redeliveries: Redeliveries,
    ) -> None:
        self._catalog = catalog
        self._topics = topics
        self._drains = drains
        self._redeliveries = redeliveries
        #: Per (queue, topic): the topic's last entry at the latest purge. Messages up to it
        #: that consumers had prefetched before the purge are dropped when they come through.
        self.purged: dict[tuple[str, str], Position] = {}
        # Whether (queue, topic) needs judging, for the view's graph it was decided in.
        self._filtered_for: object = None
        self._filtered: dict[tuple[str, str], bool] = {}
        self._snapshots: dict[RouteSnapshot, RoutingGraph] = {}

    def forget(self, queue: str) -> None:
        """``queue`` was deleted."""
        self.purged = {key: at for key, at in self.purged.items() if key[0] != queue}

    def of(self, queue: str) -> Admits:
        """The filter of ``queue``'s consumers.

        Most topics admit every message (a keyed topic, a fanout exchange's, with no drain or
        purge of the queue on it): that is decided once per topic and view, not per message
        (the judging of each message was ~1 µs of the gateway's CPU per message under
        PerfTest). The drain and purge lookups stay per message: drains follow the view
        separately (``Drains.refresh``) and purges are recorded outside of it."""
        drains = self._drains
        catalog = self._catalog
        # The view the answers in ``everything`` are for, and per topic: does it admit all?
        decided_in: VhostView | None = None
        everything: dict[str, bool] = {}

        def admits(message: Message, received: ReceivedMessage) -> bool:
            nonlocal decided_in
            topic = received.topic
            purged = self.purged
            if drains.get(queue, topic) is None and not (purged and (queue, topic) in purged):
                view = catalog.view
                if view is not decided_in:
                    decided_in = view
                    everything.clear()
                found = everything.get(topic)
                if found is None:
                    found = everything[topic] = self._admits_everything(view, queue, topic)
                if found:
                    return True
            return self._admits(queue, message, received)

        return admits

    def _admits_everything(self, view: VhostView, queue: str, topic: str) -> bool:
        """Whether ``_admits`` admits every message of ``topic`` in ``view``, when no drain and
        no purge of ``queue`` concern it: what it decides without looking at the message."""
        decoded = exchange_and_key(topic)
        if decoded is None:
            return True
        exchange = self._catalog.exchange(view, decoded[0])
        if exchange is None:
            return True
        keyed = decoded[1] is not None
        if not view.exchange_bindings:
            return keyed or exchange.type is not ExchangeType.HEADERS
        return not self._is_filtered(view, queue, topic, exchange, keyed=keyed)

    def _admits(self, queue: str, message: Message, received: ReceivedMessage) -> bool:
        topic = received.topic
        drain = self._drains.get(queue, topic)
        position: Position | None = None
        if drain is not None:
            position = position_of(received.message_id)
            if drain.excludes(position):
                return False  # written while the queue was not bound to this topic
        purged = self.purged.get((queue, topic))
        if purged is not None:
            position = position or position_of(received.message_id)
            if position <= purged and not self._redeliveries.seen(queue, received):
                return False  # prefetched before a purge (an unacked one survives it)
        decoded = exchange_and_key(topic)
        if decoded is None:
            return True  # a topic that is not an exchange's
        if drain is not None and position is not None:
            judged_by = drain.judged_by(position)
            if judged_by is not None:  # routed before an unbind: by the bindings then
                return self._judged(judged_by, decoded, queue, message)
        view = self._catalog.view
        exchange = self._catalog.exchange(view, decoded[0])
        if exchange is None:
            return True
        if not view.exchange_bindings:
            if decoded[1] is not None or exchange.type is not ExchangeType.HEADERS:
                return True  # keyed topics carry only routed messages; fanout: all
            headers = message.properties.headers
            return any(
                headers_match(b.arguments, headers)
                for b in self._topics.bindings_of(view, queue)
                if b.exchange == exchange.name
            )
        if not self._is_filtered(view, queue, topic, exchange, keyed=decoded[1] is not None):
            return True
        key = decoded[1] if decoded[1] is not None else message.routing_key
        graph = self._catalog.graph(view)
        return queue in graph.deliveries(exchange, key, lambda: message.properties.headers)

    def _is_filtered(
        self, view: VhostView, queue: str, topic: str, exchange: Exchange, *, keyed: bool
    ) -> bool:
        graph = self._catalog.graph(view)
        if self._filtered_for is not graph:
            self._filtered_for = graph
            self._filtered = {}
        found = self._filtered.get((queue, topic))
        if found is None:
            bound_to = {b.exchange for b in self._topics.bindings_of(view, queue)}
            found = self._filtered[(queue, topic)] = graph.filtered(exchange, bound_to, keyed=keyed)
        return found

    def _judged(
        self,
        snapshot: RouteSnapshot,
        decoded: tuple[str, str | None],
        queue: str,
        message: Message,
    ) -> bool:
        graph = self._snapshots.get(snapshot)
        if graph is None:
            if len(self._snapshots) >= _SNAPSHOT_GRAPHS:
                self._snapshots.clear()
            graph = self._snapshots[snapshot] = snapshot.graph()
        source = next((e for e in snapshot.exchanges if e.name == decoded[0]), None)
        if source is None:
            return False  # no path from this topic's exchange then: not the queue's
        key = decoded[1] if decoded[1] is not None else message.routing_key
        return queue in graph.deliveries(source, key, lambda: message.properties.headers)
