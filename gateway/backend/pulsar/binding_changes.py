"""Bindings on Pulsar: Queue.Bind/Unbind, Exchange.Bind/Unbind and Exchange.Delete.

Each changes which topics queues read (docs/mapping.md: a binding is the queue's subscription
on each topic it covers). A new binding's subscriptions are made before the write that makes
it visible, so that a publisher that sees it finds them in place; a binding that goes leaves
its subscriptions to drain what it routed before (drains.py), recorded in the same write, and
those that held nothing are removed at once when no other replica may still read them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

import trio

from gateway.amqp import commands as cmd
from gateway.backend.catalog import Catalog
from gateway.backend.interface import Owner
from gateway.backend.pulsar.activation import activation_for
from gateway.backend.pulsar.binding_subscriptions import (
    BindingSubscriptions,
    ExchangeBindingChanges,
    Prepared,
)
from gateway.backend.pulsar.drains import Drains, plan_drains, position_of
from gateway.backend.pulsar.queue_count import flush_writes
from gateway.backend.pulsar.queue_subscriptions import QueueSubscriptions
from gateway.backend.pulsar.queue_topics import QueueTopics, changed_view
from gateway.backend.pulsar.reply_codes import amqp_errors
from gateway.backend.pulsar.resources import PulsarResources
from gateway.metadata.store import DrainRecord, VhostView
from gateway.model.entities import Binding, ExchangeType
from gateway.model.routing import binding_topics
from gateway.model.vhost import Namespace

__all__ = ["BindingChanges"]


class BindingChanges:
    """The binding commands of one vhost: subscriptions, the metadata write, drains."""

    def __init__(
        self,
        catalog: Catalog,
        namespace: Namespace,
        topics: QueueTopics,
        resources: PulsarResources,
        drains: Drains,
        subscriptions: QueueSubscriptions,
    ) -> None:
        self._catalog = catalog
        self._namespace = namespace
        self._topics = topics
        self._r = resources
        # The vhost's drains index (refreshed after each write: consumers filter by it).
        self._drains = drains
        self._subscriptions = subscriptions
        self._binding_subscriptions = BindingSubscriptions(
            catalog, topics, resources, subscriptions.subscribe
        )
        self._exchange_bindings = ExchangeBindingChanges(
            self._binding_subscriptions,
            drains.refresh,
            self._plan_drains,
            self._unsubscribe_drained,
        )

    async def delete_exchange(self, command: cmd.ExchangeDelete) -> None:
        bindings = await self._catalog.exchange_bindings(command)
        view = self._catalog.view
        name = command.exchange
        # The queues that lose topics: those bound to it, and those its exchange bindings
        # lead to (they read its topics, and those of the exchanges leading to it).
        queues = {binding.queue for binding in bindings or ()}
        if any(name in (e.source, e.destination) for e in view.exchange_bindings):
            queues |= self._topics.affected(view, [name])
        if not queues:
            await self._catalog.delete_exchange(command)
            return
        if view.exchange_bindings:
            drains = await self._plan_drains(
                view, queues, after=changed_view(view, deleted_exchange=name)
            )
        else:  # every topic of its queues either stays as it is or goes
            drains = await self._plan_drains(view, queues, without=bindings or ())
        await self._catalog.delete_exchange(command, drains=drains)
        await self._unsubscribe_drained(view, drains)

    async def _plan_drains(
        self,
        before: VhostView,
        queues: Iterable[str],
        *,
        after: VhostView | None = None,
        without: Iterable[Binding] = (),
    ) -> dict[tuple[str, str], DrainRecord]:
        """The drain records a change writes (drains.py), by (queue, local topic name), as
        the store takes them.

        This replica's writes still in flight to the topics the queues read are stored
        first: AMQP orders a channel's methods (§4.7), so a message published just before
        an unbind on the same channel was routed while the binding existed and must stay
        the queue's; read before its write completes, the topic's end would leave it past
        the drain's end, filtered out (5 of 5 lost without confirms)."""
        queues = sorted(set(queues))
        await flush_writes(
            self._r, {topic for queue in queues for topic in self._topics.bound(before, queue)}
        )
        drains, _ = await plan_drains(
            self._topics, self._r.admin, before, queues, after=after, without=without
        )
        return {(q, self._topics.local(t)): record for (q, t), record in drains.items()}

    async def _unsubscribe_drained(
        self, before: VhostView, drains: Mapping[tuple[str, str], DrainRecord]
    ) -> None:
        """After the unbind: drop subscriptions that held nothing (their ``REMOVE``
        records), unless a binding made meanwhile needs the topic again or another replica
        may still read it (then the leader does, from the records)."""
        view = self._catalog.view
        self._drains.refresh(view)
        for (queue, local), record in drains.items():
            topic = self._topics.full_name(local)
            if (
                record.removing
                and not self._topics.needs(view, queue, topic)
                and self._subscriptions.alone(before, queue)
            ):
                await self._subscriptions.unsubscribe(topic, queue)

    async def bind_queue(self, command: cmd.QueueBind, owner: Owner) -> None:
        queue, exchange, routing_key = command.queue, command.exchange, command.routing_key
        binding, target = await self._catalog.binding(command, owner)
        view = self._catalog.view
        activation = activation_for(target, routing_key)
        # Subscriptions first, so a publisher that sees the binding finds them in place; a
        # lazy topic nobody has published to yet is left to the handshake after the write.
        subscribed = self._topics.of_binding(view, binding)
        drains: dict[str, DrainRecord] = {}
        pending: list[str] = []
        for topic in subscribed:
            record = view.drains.get((queue, self._topics.local(topic)))
            if record is not None and record.end is not None and record.resumed is None:
                # Bound again while draining: messages from now on are the queue's again;
                # only the unbound window is skipped (recorded with the binding).
                last = await amqp_errors(self._r.admin.last_message_id(topic), "binding")
                drains[self._topics.local(topic)] = DrainRecord(record.end, position_of(last))
            elif not self._topics.active(view, activation):
                pending.append(topic)
                continue
            await self._subscriptions.subscribe(topic, queue)
        # Through exchange bindings into the exchange, the queue may now read other topics.
        prepared = Prepared()
        if view.exchange_bindings:
            prepared = await self._binding_subscriptions.before_write(
                view, changed_view(view, added=[binding]), [queue]
            )
            drains.update({local: record for (_, local), record in prepared.drains.items()})
        existed = binding in view.bindings
        await self._catalog.add_binding(binding, drains=drains or None)
        self._drains.refresh(self._catalog.view)
        try:
            await self._binding_subscriptions.after_queue_binding(binding, prepared)
        except BaseException:
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                if not existed:
                    await self._catalog.remove_binding(binding, drains={})
            raise
        if activation is not None:

            async def unbind(_queue: str) -> None:
                if not existed:
                    await self._catalog.remove_binding(binding, drains={})

            for topic in pending:  # one: a lazy binding names one topic
                await self._subscriptions.subscribe_if_active(activation, topic, queue, undo=unbind)
        elif target.type is ExchangeType.TOPIC:
            # Keys registered meanwhile, on any replica: read from ZooKeeper after our write,
            # not from the view (see publish_routes.py, the other half of this handshake).
            store = self._r.store
            keys = await self._catalog.write(
                store.sync_topic_keys(self._catalog.namespace, exchange)
            )
            fresh = binding_topics(self._namespace, target, binding, keys)
            for topic in set(fresh) - set(subscribed):
                await self._subscriptions.subscribe(topic, queue)

    async def unbind_queue(self, command: cmd.QueueUnbind, owner: Owner) -> None:
        binding = await self._catalog.unbinding(command, owner)
        if binding is None:
            return
        view = self._catalog.view
        if view.exchange_bindings or self._judged(view, binding.exchange):
            # The bindings that judge a topic's messages may change: see them after.
            after = changed_view(view, removed=[binding])
            drains = await self._plan_drains(view, [binding.queue], after=after)
        else:
            drains = await self._plan_drains(view, [binding.queue], without=[binding])
        removed = await self._catalog.remove_binding(
            binding, drains={local: record for (_, local), record in drains.items()}
        )
        if removed:
            await self._unsubscribe_drained(view, drains)

    def _judged(self, view: VhostView, exchange: str) -> bool:
        """Whether ``exchange``'s bindings judge each message (a headers exchange's)."""
        found = self._catalog.exchange(view, exchange)
        return found is not None and found.type is ExchangeType.HEADERS

    async def bind_exchange(self, command: cmd.ExchangeBind) -> None:
        await self._exchange_bindings.bind(command)

    async def unbind_exchange(self, command: cmd.ExchangeUnbind) -> None:
        await self._exchange_bindings.unbind(command)
