"""The subscriptions a new binding needs through exchange bindings, before and after its write.

A queue binding on exchange E, or an exchange binding X -> D, can complete paths from other
exchanges' topics to queues (model/graph.py: the graph is flattened into each queue's topics).
Every such (queue, topic) needs the queue's subscription on the topic before a message the
queue wants is written there, on any replica, after Bind-Ok:

* **before the write**, from this replica's view: the pairs the binding adds whose topic is in
  use (a keyed topic once its key is registered; a fanout or headers exchange's topic always)
  are subscribed, so that a publisher of this replica that sees the binding finds them; a
  pair whose subscription still drains an earlier unbind is resumed in the binding's own
  transaction (drains.py);
* **after the write**, from ZooKeeper (zk_graph.py): the paths other replicas completed a
  moment ago, and the keys they registered, that this view does not show yet.

Without exchange bindings in the vhost, a queue binding costs one ZooKeeper read more than it
did (E's node: does an exchange binding lead into E?); nothing else changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import trio

from gateway.amqp import commands as cmd
from gateway.backend.catalog import Catalog
from gateway.backend.pulsar.drains import position_of
from gateway.backend.pulsar.queue_topics import QueueTopics, changed_view, source_topics
from gateway.backend.pulsar.reply_codes import amqp_errors
from gateway.backend.pulsar.resources import PulsarResources
from gateway.backend.pulsar.zk_graph import ZooKeeperGraph
from gateway.metadata.store import DrainRecord, VhostView
from gateway.model.entities import Binding, ExchangeBinding

__all__ = ["BindingSubscriptions", "ExchangeBindingChanges", "Prepared"]

Subscribe = Callable[[str, str], Awaitable[None]]
Drains = Mapping[tuple[str, str], DrainRecord]


class PlanDrains(Protocol):
    """What ``BindingChanges._plan_drains`` is: the records a change writes."""

    async def __call__(
        self, before: VhostView, queues: Iterable[str], *, after: VhostView | None = None
    ) -> Drains: ...


@dataclass
class Prepared:
    """What was done before a binding's write: the drain records to write with it, and the
    (queue, topic) pairs subscribed or known to be (not to be subscribed again)."""

    drains: dict[tuple[str, str], DrainRecord] = field(default_factory=dict)
    done: set[tuple[str, str]] = field(default_factory=set)


class BindingSubscriptions:
    def __init__(
        self,
        catalog: Catalog,
        topics: QueueTopics,
        resources: PulsarResources,
        subscribe: Subscribe,
    ) -> None:
        self.catalog = self._catalog = catalog
        self.topics = self._topics = topics
        self._r = resources
        # subscribe(topic, queue): queue_subscriptions.py's, which also adds the topic to the
        # queue's consumers.
        self._subscribe = subscribe

    async def before_write(
        self, before: VhostView, after: VhostView, queues: Iterable[str]
    ) -> Prepared:
        """Subscribe the pairs of ``queues`` whose topics ``after`` adds through exchange
        bindings and that are in use; resume those that drain."""
        prepared = Prepared()
        topics = self._topics
        if not after.exchange_bindings:
            return prepared
        for queue in sorted(set(queues)):
            known = topics.bound(before, queue, live=False)
            prepared.done.update((queue, t) for t in topics.bound(before, queue))
            live = topics.flattened(after, queue)
            for topic in sorted(topics.flattened(after, queue, live=False) - known):
                record = before.drains.get((queue, topics.local(topic)))
                if record is not None and record.end is not None and record.resumed is None:
                    # Bound again while draining: messages from now on are the queue's again;
                    # only the unbound window is skipped (recorded with the binding).
                    last = await amqp_errors(self._r.admin.last_message_id(topic), "binding")
                    resumed = DrainRecord(record.end, position_of(last), record.via)
                    prepared.drains[(queue, topics.local(topic))] = resumed
                elif topic not in live:
                    continue  # a key nobody published to: left to the handshake
                await self._subscribe(topic, queue)
                prepared.done.add((queue, topic))
        return prepared

    async def after_queue_binding(self, binding: Binding, prepared: Prepared) -> None:
        """The handshake's binder half for a queue binding, through exchange bindings into
        its exchange that ZooKeeper has now."""
        store = self._r.store
        if not self._catalog.view.exchange_bindings and not await self._catalog.write(
            store.sync_has_exchange_bindings(self._catalog.namespace)
        ):
            # None in the namespace: nothing leads into the exchange, and listing its node
            # (every binding it has, thousands for a busy exchange) would be for nothing.
            return
        graph = ZooKeeperGraph(self._catalog, store)
        if not (await graph.edges(binding.exchange)).incoming:
            return
        upstream = await graph.upstream(binding.exchange)
        await self._subscribe_found(graph, upstream - {binding.exchange}, {binding.queue}, prepared)

    async def after_exchange_binding(self, binding: ExchangeBinding, prepared: Prepared) -> None:
        """The handshake's binder half for an exchange binding: from every exchange that leads
        to its source, to every queue its destination leads to, as ZooKeeper has them now."""
        graph = ZooKeeperGraph(self._catalog, self._r.store)
        upstream = await graph.upstream(binding.source)
        await graph.downstream(binding.destination)
        await self._subscribe_found(graph, upstream, None, prepared)

    async def _subscribe_found(
        self,
        graph: ZooKeeperGraph,
        sources: Iterable[str],
        queues: set[str] | None,
        prepared: Prepared,
    ) -> None:
        """Subscribe every queue (of ``queues``, None: any) that the graph read leads to from
        the topics in use of ``sources``, unless done already."""
        routing = await graph.graph()
        for name in sorted(sources):
            source = await graph.exchange(name)
            if source is None:
                continue
            keys: set[str] = set()
            if source.type.keyed:
                keys = set(await graph.keys(source))
                if not self._r.lazy_subscriptions:
                    keys |= routing.literal_keys(source)
            for topic, reached in source_topics(
                self._topics.namespace, routing, source, keys
            ).items():
                for queue in sorted(reached if queues is None else reached & queues):
                    if (queue, topic) not in prepared.done:
                        await self._resume_if_draining(queue, topic)
                        await self._subscribe(topic, queue)
                        prepared.done.add((queue, topic))

    async def _resume_if_draining(self, queue: str, topic: str) -> None:
        """A pair found after the write whose subscription drains an earlier unbind: from
        now on its messages are the queue's again (the record was not in the view, or not
        known to need it, when the binding was written)."""
        store, namespace = self._r.store, self._catalog.namespace
        local = self._topics.local(topic)
        stored = await self._catalog.write(store.read_drain(namespace, queue, local))
        if stored is None or stored[0].end is None or stored[0].resumed is not None:
            return
        record = stored[0]
        last = await amqp_errors(self._r.admin.last_message_id(topic), "binding")
        resumed = DrainRecord(record.end, position_of(last), record.via)
        await self._catalog.write(
            store.update_drain(namespace, queue, local, resumed, version=stored[1])
        )


class ExchangeBindingChanges:
    """Exchange.Bind and Exchange.Unbind on Pulsar: subscriptions, the write, drains."""

    def __init__(
        self,
        subscriptions: BindingSubscriptions,
        refresh: Callable[[VhostView], None],
        plan: PlanDrains,
        unsubscribe: Callable[[VhostView, Drains], Awaitable[None]],
    ) -> None:
        self._subscriptions = subscriptions
        self._catalog = subscriptions.catalog
        self._topics = subscriptions.topics
        # refresh(view): the drains index after a write; plan: the drain records
        # for a change; unsubscribe(before, drains): what drained at once goes.
        self._refresh = refresh
        self._plan = plan
        self._unsubscribe = unsubscribe

    async def bind(self, command: cmd.ExchangeBind) -> None:
        binding = await self._catalog.exchange_binding(command)
        view = self._catalog.view
        after = changed_view(view, added=[binding])
        queues = self._topics.affected(after, [binding.destination])
        # Subscriptions first (from the view), the binding, then what ZooKeeper says other
        # replicas completed meanwhile, then Bind-Ok.
        prepared = await self._subscriptions.before_write(view, after, queues)
        existed = binding in view.exchange_bindings
        await self._catalog.add_exchange_binding(binding, drains=prepared.drains or None)
        self._refresh(self._catalog.view)
        try:
            await self._subscriptions.after_exchange_binding(binding, prepared)
        except BaseException:
            # Answered without its subscriptions, the binding would lose messages: undone.
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                if not existed:
                    await self._catalog.remove_exchange_binding(binding)
            raise

    async def unbind(self, command: cmd.ExchangeUnbind) -> None:
        binding = await self._catalog.exchange_unbinding(command)
        if binding is None:
            return
        view = self._catalog.view
        queues = self._topics.affected(view, [binding.destination])
        drains = await self._plan(view, queues, after=changed_view(view, removed=[binding]))
        if await self._catalog.remove_exchange_binding(binding, drains=drains):
            await self._unsubscribe(view, drains)
