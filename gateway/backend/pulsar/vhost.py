"""One vhost on Pulsar: entities in the metadata store, messages in the namespace's topics.

The mapping (reference/002, DESIGN.md, docs/mapping.md): an exchange is a topic, and for direct
and topic exchanges the routing key is part of the topic's name; a binding is the queue's
Shared subscription on each topic the binding covers; every queue is bound to the default
exchange's ``amq.default__<queue>`` topic.

Ordering that makes routing race-free on one replica: a subscription is created before the
binding (or queue) that needs it becomes visible, and a topic exchange's new routing key is
registered, and the subscriptions of the patterns it matches created, before the first
message is written to its topic.

Lifetimes across the fleet (docs/fleet.md): consumers are registered in the metadata store
while they run (Declare-Ok's count, exclusive consumers and auto-delete see every replica's),
an exclusive queue's owner record lives as long as this replica's session, drain records are
written with the unbind that starts them, and a deleted queue's subscriptions are recorded for
removal in the same write as the delete. The namespace's leader (leader/namespace_leader.py)
finishes what a dead replica left: it deletes orphaned exclusive queues, abandoned auto-delete
queues, and drained or recorded subscriptions.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import trio

from gateway.amqp import commands as cmd
from gateway.amqp.errors import AMQPError, ChannelError, ReplyCode
from gateway.backend.catalog import Catalog, CatalogVirtualHost
from gateway.backend.expiration_property import check_expiration, has_expiration
from gateway.backend.interface import (
    NO_QOS,
    ConsumerQos,
    Delivery,
    Message,
    Owner,
    PublishOutcome,
    QueueStatus,
    QueueSubscription,
)
from gateway.backend.pulsar.acks_applied import acks_applied
from gateway.backend.pulsar.activation import default_activation
from gateway.backend.pulsar.admission import Admission
from gateway.backend.pulsar.basic_get import BasicGetConsumers
from gateway.backend.pulsar.binding_changes import BindingChanges
from gateway.backend.pulsar.consumers.priority_reads import priority_options, to_read
from gateway.backend.pulsar.consumers.strategy import strategy_of
from gateway.backend.pulsar.dead_letter_publishing import DeadLettering
from gateway.backend.pulsar.delivery import Copy, PulsarDelivery, PulsarQueueSubscription
from gateway.backend.pulsar.delivery_records import DeliveryRecord
from gateway.backend.pulsar.drains import Drains, position_of
from gateway.backend.pulsar.held_back import HeldBack
from gateway.backend.pulsar.held_until_closed import HeldUntilClosed
from gateway.backend.pulsar.length_limit import REFUSED_ARGUMENTS, LengthLimits, count_ready
from gateway.backend.pulsar.message_ttl import QueueExpiry
from gateway.backend.pulsar.messages import ENQUEUED, REQUEUED, to_pulsar
from gateway.backend.pulsar.publish_routes import PublishRoutes
from gateway.backend.pulsar.queue_count import broker_ready_count
from gateway.backend.pulsar.queue_subscriptions import QueueSubscriptions
from gateway.backend.pulsar.queue_topics import QueueTopics
from gateway.backend.pulsar.queue_types.dispatch import type_of, type_of_queue
from gateway.backend.pulsar.queue_types.interface import ConsumeRequest
from gateway.backend.pulsar.queue_types.stream.queues import StreamQueues
from gateway.backend.pulsar.queue_use import QueueUse
from gateway.backend.pulsar.redeliveries import Redeliveries
from gateway.backend.pulsar.registered import RegisteredSubscription
from gateway.backend.pulsar.reply_codes import amqp_errors
from gateway.backend.pulsar.reply_forwarding import ReplyForwarding
from gateway.backend.pulsar.resources import PulsarResources
from gateway.backend.pulsar.sending import Sending
from gateway.backend.pulsar.write_failures import PublishFailures
from gateway.metadata.errors import ConditionNotMet
from gateway.metadata.store import QueueCondition, VhostView
from gateway.model.consumers import consumer_priority, refuse_priority
from gateway.model.entities import DEFAULT_EXCHANGE, Binding, Queue, resource
from gateway.model.naming import subscription_for, topic_for
from gateway.model.ttl import queue_expires, queue_message_ttl
from gateway.model.vhost import Namespace
from gateway.observability.counters import COUNTERS
from gateway.pulsar.consumer import ConsumerOptions, SubscriptionType
from gateway.pulsar.priority_level import level_for, priority_levels

log = logging.getLogger("gateway.pulsar.vhost")

# How long Basic.Cancel waits for the consumer's unregistration (ZooKeeper answers in
# milliseconds; without ZooKeeper the record goes with the session anyway).
GONE_WAIT = 10.0


class PulsarVirtualHost(CatalogVirtualHost):
    def __init__(self, name: str, namespace: Namespace, resources: PulsarResources) -> None:
        self.name = name
        self.namespace = namespace
        self._r = resources
        # Set once the vhost's metadata was deleted: the backend opens it afresh next time.
        self.deleted = False
        self.catalog = Catalog(name, str(namespace), resources.store, REFUSED_ARGUMENTS)
        self.replies = ReplyForwarding(
            resources, f"non-persistent://{namespace.tenant}/{namespace.namespace}/"
        ).registry
        self._consumers: dict[str, set[PulsarQueueSubscription]] = {}
        # Each consumer's registration in the metadata store (its id there), and, once the
        # consumer closed, the unregistration under way (set when done).
        self._registrations: dict[PulsarQueueSubscription, str] = {}
        self._leaving: dict[PulsarQueueSubscription, trio.Event] = {}
        # Per queue: its consumers cancelled and not closed yet (closing, or holding
        # unsettled deliveries): ``_consumer_closed`` says why.
        self._retired: HeldUntilClosed[PulsarQueueSubscription] = HeldUntilClosed(
            lambda task: self._r.nursery.start_soon(task)
        )
        self._topics = QueueTopics(
            self.catalog, namespace, lazy_subscriptions=resources.lazy_subscriptions
        )
        self._drains = Drains(self._topics.prefix)
        self._basic_gets = BasicGetConsumers(
            lambda task: self._r.nursery.start_soon(task),
            lambda queue, ahead: self._subscription(queue, exclusive=False, read_ahead=ahead),
            lambda queue: self._message_count(self._view, queue),
        )
        self._subscriptions = QueueSubscriptions(
            self.catalog, self._topics, resources, self._consumers, self._basic_gets.by_queue
        )
        self._publish_routes = PublishRoutes(
            self.catalog, namespace, resources, self._subscriptions.subscribe_to_write
        )
        self._redeliveries = Redeliveries()
        # The fleet's delivery records (AMQP's redelivered across replicas), once started.
        self.records = DeliveryRecord(resources.store, str(namespace), self._redeliveries)
        self._admission = Admission(self.catalog, self._topics, self._drains, self._redeliveries)
        self._bindings = BindingChanges(
            self.catalog, namespace, self._topics, resources, self._drains, self._subscriptions
        )
        # Sending and dead-lettering need each other: a dead letter is sent, and a message a
        # full queue refuses may be dead-lettered (x-overflow reject-publish-dlx).
        self._sending: Sending
        self._dead_lettering = DeadLettering(
            self.catalog, lambda x, m: self._sending.send(x, m), self._write_to_queue
        )
        self._limits = LengthLimits(self._ready_now, self._dead_lettering.dead_letter)
        self._sending = Sending(
            self.catalog, namespace, resources, self._publish_routes, self._limits
        )
        self._queue_use = QueueUse(namespace, resources.admin)
        # A failed write of a publish fails with the AMQP error (write_failures.py).
        self._failures = PublishFailures()
        self.streams = StreamQueues(name, resources, self._topics)

    # ------------------------------------------------------------------ helpers

    @property
    def _view(self) -> VhostView:
        return self.catalog.view

    def bound_topics(self, view: VhostView, queue: str) -> set[str]:
        """The topics ``queue``'s bindings cover in ``view``, lazy ones nobody published to
        included (for the leader's cleaner: a subscription there is never in the way)."""
        return self._topics.bound(view, queue, live=False)

    def live_topics(self, view: VhostView, queue: str) -> set[str]:
        """The topics ``queue`` has subscriptions on (for the queue statistics)."""
        return self._topics.bound(view, queue)

    def binding_topics(self, view: VhostView, binding: Binding) -> list[str]:
        """The topics ``binding`` has subscriptions on in ``view`` (for the reconciler)."""
        return self._topics.live_of_binding(view, binding)

    def fed_through_exchanges(self, view: VhostView) -> set[tuple[str, str]]:
        """(queue, topic) of the topics in use that reach queues through exchange bindings
        (for the reconciler)."""
        return self._topics.fed_through_exchanges(view)

    def needs(self, view: VhostView, queue: str, topic: str) -> bool:
        """Whether ``queue`` exists and reads, or may read, ``topic`` in ``view``."""
        return self._topics.needs(view, queue, topic)

    def default_topic(self, queue: str) -> str:
        """The queue's own topic, the default exchange's."""
        return self._topics.default_topic(queue)

    def topic(self, local_name: str) -> str:
        """The full name of a topic of this namespace (records name topics locally)."""
        return self._topics.full_name(local_name)

    # ------------------------------------------------------------------ exchanges

    async def delete_exchange(self, command: cmd.ExchangeDelete) -> None:
        await self._bindings.delete_exchange(command)

    # ------------------------------------------------------------------ queues

    async def declare_queue(self, command: cmd.QueueDeclare, owner: Owner) -> QueueStatus:
        name = command.queue
        topic = topic_for(self.namespace, DEFAULT_EXCHANGE, name)
        activation = default_activation(name)
        subscribed = False

        async def subscribe_default() -> None:
            # Before anyone can see the queue, what it reads is made (queue_types/).
            nonlocal subscribed
            subscribed = await type_of(command.arguments).create(self, name, command.arguments)

        queue, created = await self.catalog.declare_queue(command, owner, subscribe_default)
        if created and not subscribed:
            expiring = queue_expires(queue.arguments) is not None
            if expiring:
                # Its uses are recorded on its own subscription (queue_use.py), so that one is
                # made now rather than at the first publish.
                await self.catalog.write(
                    self._r.store.register_topic_key(self.catalog.namespace, *activation)
                )
            if expiring or not command.server_named:
                # The binder's half of the handshake. A name made up for this command (128
                # random bits) cannot have been published to before it was created, so no
                # key of it can be registered yet: nothing to read (docs/fleet.md).
                await self._subscriptions.subscribe_if_active(
                    activation, topic, name, undo=self.drop_queue
                )
        if not command.passive:  # a redeclare renews an x-expires lease (queue_use.py)
            await self._queue_use.used(name, queue.arguments)
        if created:
            return QueueStatus(name, 0, 0, created=True)
        view = self._view
        return await type_of_queue(view.queues.get(name)).status(self, view, name)

    async def subscribe_own_topic(self, name: str) -> bool:
        """A publisher of this replica that knows the key and sees the queue writes at once:
        the queue's subscription on its own topic exists before anyone can see the queue,
        if that topic is active (activation.py); True if it made it."""
        if not self._topics.active(self._view, default_activation(name)):
            return False
        await self._subscriptions.subscribe(topic_for(self.namespace, DEFAULT_EXCHANGE, name), name)
        return True

    async def subscribed_status(self, view: VhostView, queue: str) -> QueueStatus:
        """Declare-Ok's counts of a queue read through subscriptions."""
        # Consumers on every replica (registered in the metadata store while they run).
        consumers = view.consumers.get(queue, 0)
        count = await self._message_count(view, queue, after_own_acks=True)
        return QueueStatus(queue, count, consumers)

    async def _message_count(
        self, view: VhostView, queue: str, *, after_own_acks: bool = False
    ) -> int:
        """Messages ready in the queue, as AMQP counts them (not awaiting an ack): the
        broker's count less the deliveries this replica's clients hold unsettled.
        ``after_own_acks``: once the broker applied the acks this replica's clients sent
        (acks_applied.py), for the counts a client reads back (Declare-Ok, delete if-empty,
        purge); not for Get-Ok's count or a length limit's, which would wait up to an ack
        group (~100 ms) on every Get or publish that recounts."""
        readers = list(self._consumers.get(queue, ()))
        getter = self._basic_gets.by_queue.get(queue)
        if getter is not None:
            readers.append(getter)
        if after_own_acks:
            await acks_applied(self._r.admin, [reader.consumer for reader in readers])
        total = await broker_ready_count(self._r, self._topics.read_by(view, queue), queue)
        # Messages a client holds unacknowledged are not ready; Pulsar's own unacked figure
        # would also take off what consumers merely prefetched. (Those of other replicas'
        # clients are not known here.)
        held = sum(reader.outstanding for reader in readers)
        return max(0, total - held)

    def footprint(self) -> dict[str, int]:
        """How many entries this replica keeps per queue or key, by structure: what queue
        churn must not grow (tests/integration/clients/test_queue_churn.py). Bounded caches (the
        publish topics, the producer cache, closed when idle) are left out."""
        return {
            "consumers": len(self._consumers),
            "registrations": len(self._registrations),
            "leaving": len(self._leaving),
            "getters": len(self._basic_gets.by_queue),
            "getter_used": len(self._basic_gets.used),
            "left_after_get": len(self._basic_gets.left_after_get),
            "purged": len(self._admission.purged),
            "prepared_keys": len(self._publish_routes.prepared_keys),
        }

    def held(self) -> dict[str, int]:
        """Per queue, the deliveries this replica's clients hold unacknowledged."""
        held: dict[str, int] = {}
        for queue, subscriptions in self._consumers.items():
            held[queue] = sum(s.outstanding for s in subscriptions)
        for queue, getter in self._basic_gets.by_queue.items():
            held[queue] = held.get(queue, 0) + getter.outstanding
        return held

    async def delete_queue(self, command: cmd.QueueDelete, owner: Owner) -> int:
        name = command.queue
        if not await self.catalog.has_queue(name):
            return 0  # idempotent, as in RabbitMQ
        entity = await self.catalog.find_queue(name, owner)
        return await type_of(entity.arguments).delete(self, command)

    async def delete_subscribed(self, command: cmd.QueueDelete) -> int:
        """Queue.Delete of a queue read through subscriptions: if-unused and if-empty are
        checked; the messages it had ready."""
        name, if_unused, if_empty = command.queue, command.if_unused, command.if_empty
        view = self._view
        if if_unused and (self._consumers.get(name) or view.consumers.get(name)):
            raise self.catalog.in_use("queue", name)
        count = await self._message_count(view, name, after_own_acks=True)
        if if_empty and count:
            raise ChannelError(
                ReplyCode.PRECONDITION_FAILED, f"{resource('queue', name, self.name)} not empty"
            )
        try:
            # if-unused is decided by the store: a consumer may have come on another replica.
            await self.drop_queue(name, condition=QueueCondition.UNUSED if if_unused else None)
        except ConditionNotMet:
            raise self.catalog.in_use("queue", name) from None
        return count

    async def drop_queue(self, name: str, *, condition: QueueCondition | None = None) -> bool:
        """Delete the queue (if ``condition`` holds: ``ConditionNotMet`` otherwise) and its
        subscriptions; False if it was not there. The subscriptions are recorded for removal
        in the same write as the delete, so the leader removes them if we cannot."""
        view = self._view
        alone = self._subscriptions.alone(view, name)
        # Its subscriptions, and those an earlier queue of the same name left to remove.
        topics = self._topics.read_by(view, name) | {
            self.topic(local)
            for (queue, local), record in view.drains.items()
            if queue == name and record.removing
        }
        deleted = await self.catalog.delete_queue(
            name, condition=condition, subscriptions=sorted(self._topics.local(t) for t in topics)
        )
        self._drains.refresh(self._view)
        for subscription in [*self._consumers.pop(name, ()), *self._retired.take(name)]:
            await subscription.end()
        await self._basic_gets.end(name)
        self._admission.forget(name)
        entity = view.queues.get(name)
        if entity is not None:
            await type_of(entity.arguments).dropped(self, name)
        if deleted:
            COUNTERS.queues_deleted += 1
        if deleted and alone:
            for topic in topics:
                await self.remove_subscription(name, topic)
        return deleted

    async def remove_subscription(self, queue: str, topic: str) -> bool:
        """Delete the queue's subscription on ``topic`` and its ``REMOVE`` record (for the
        leader's cleaner and key sweeper); False if Pulsar or ZooKeeper refused."""
        return await self._subscriptions.remove(queue, topic)

    async def purge_queue(self, command: cmd.QueuePurge, owner: Owner) -> int:
        entity = await self.catalog.find_queue(command.queue, owner)
        return await type_of(entity.arguments).purge(self, entity)

    async def purge_subscribed(self, name: str) -> int:
        """Queue.Purge of a queue read through subscriptions: each subscription skips to its
        topic's end, and what this replica's consumers hold is marked purged."""
        view = self._view
        count = await self._message_count(view, name, after_own_acks=True)
        holders = list(self._consumers.get(name, ()))
        getter = self._basic_gets.by_queue.get(name)
        if getter is not None:
            holders.append(getter)  # retired below; its clients may still hold messages
        await self._basic_gets.close(name)
        admin = self._r.admin
        for topic in self._topics.read_by(view, name):
            last = await amqp_errors(admin.last_message_id(topic), f"purging '{name}'")
            purged = self._admission.purged[(name, topic)] = position_of(last)
            for holder in holders:
                holder.purged_at[topic] = purged
            await amqp_errors(admin.skip_all(topic, subscription_for(name)), f"purging '{name}'")
        return count

    # ------------------------------------------------------------------ bindings

    async def bind_queue(self, command: cmd.QueueBind, owner: Owner) -> None:
        await self._bindings.bind_queue(command, owner)

    async def unbind_queue(self, command: cmd.QueueUnbind, owner: Owner) -> None:
        await self._bindings.unbind_queue(command, owner)

    async def bind_exchange(self, command: cmd.ExchangeBind) -> None:
        await self._bindings.bind_exchange(command)

    async def unbind_exchange(self, command: cmd.ExchangeUnbind) -> None:
        await self._bindings.unbind_exchange(command)

    # ------------------------------------------------------------------ publishing

    async def publish(self, message: Message, *, mandatory: bool = False) -> PublishOutcome:
        view = self._view
        exchange = self.catalog.exchange(view, message.exchange)
        if exchange is None:  # declared elsewhere a moment ago? (or 404)
            exchange = await self.catalog.require_fresh_exchange(message.exchange)
            view = self._view
        self.catalog.check_publishable(exchange)
        check_expiration(message)
        outcome = await self._sending.send(exchange, message, mandatory=mandatory, view=view)
        return self._failures.outcome(outcome)

    def publish_now(self, message: Message, *, mandatory: bool = False) -> PublishOutcome | None:
        catalog = self.catalog
        view = catalog.view
        exchange = catalog.exchange(view, message.exchange)
        if exchange is None:
            return None  # declared elsewhere a moment ago? publish() asks ZooKeeper
        catalog.check_publishable(exchange)
        if has_expiration(message):  # nearly none has one: not asked twice per message
            check_expiration(message)
        stored = self._sending.send_now(exchange, message, view)
        return None if stored is None else self._failures.routed(stored)

    async def _ready_now(self, queue: str) -> int:
        """Declare-Ok's count of ``queue``, for reject-publish limits (length_limit.py)."""
        return await self._message_count(self._view, queue)

    async def count_ready(self, queue: str) -> int:
        """``queue``'s ready messages fleet-wide less all read ahead, for the drop-head trim
        (length_limit.py)."""
        view = self._view
        return await count_ready(self._r.admin, self._topics.read_by(view, queue), queue)

    # ------------------------------------------------------------------ consuming

    async def _subscription(
        self,
        queue: str,
        *,
        exclusive: bool,
        prefetch: int = 0,
        read_ahead: int | None = None,
        ordered: bool = True,
        priority: int = 0,
        subscription_type: SubscriptionType = "shared",
        shares_batches: bool = False,
    ) -> PulsarQueueSubscription:
        """A consumer of every topic of ``queue``, reading ahead by ``prefetch`` (see
        ``receiver_queue_for``) or exactly ``read_ahead`` messages per topic. Of a priority
        queue (unless not ``ordered``), it holds up to its window of messages and delivers
        the highest priority of them first (docs/compatibility.md, "Priority queues").
        ``priority``: its consumer priority (Pulsar's priority level, when it can be set).
        ``shares_batches``: what it reads ahead of batches while its client is at its
        ``prefetch`` goes on to the queue's other consumers (held_back.py)."""
        view = self._view
        self._drains.refresh(view)  # its filter needs drains recorded before follow() ran
        topics = sorted(self._topics.read_by(view, queue))
        if read_ahead is None:
            read_ahead = self._r.receiver_queue_for(prefetch, len(topics))
        await self.records.ready()  # the other replicas' deliveries, before any of ours
        # Attached while a creation of its subscriptions is under way, it would be disconnected.
        await self._subscriptions.creations_done(queue)
        levels = priority_levels()
        options = ConsumerOptions(
            subscription_type=subscription_type,
            receiver_queue_size=read_ahead,
            batch_index_ack=self._r.batch_index_acks,
            priority_level=level_for(priority) if levels.available else None,
        )
        entity = view.queues.get(queue)
        ordering = None
        if ordered and entity is not None:
            ordering = priority_options(self._r, options, entity.arguments, prefetch=prefetch)
        consumer = await amqp_errors(
            self._r.client.subscribe(topics, subscription_for(queue), ordering or options),
            f"consuming from '{queue}'",
        )
        return PulsarQueueSubscription(
            queue,
            consumer,
            self._admission.of(queue),
            self._consumer_closed,
            self._redeliveries,
            self._requeue_copies,
            self._dead_lettering.dead_letter,
            exclusive=exclusive,
            expiry=self._expiry(view, queue),
            returned=self.records.returned,
            fill=None if ordering is None else to_read(self._r),
            priority=priority,
            spawn=self._r.nursery.start_soon,
            held_back=self._held_back(queue, prefetch) if shares_batches and prefetch else None,
        )

    def _held_back(self, queue: str, prefetch: int) -> HeldBack:
        def others_consume() -> bool:
            # Registered on any replica (the store's count), or here.
            here = len(self._consumers.get(queue, ()))
            return max(self._view.consumers.get(queue, 0), here) > 1

        return HeldBack(prefetch, others_consume, self._r.nursery.start_soon)

    def _expiry(self, view: VhostView, queue: str) -> QueueExpiry:
        """The TTL check of ``queue``'s consumers (message_ttl.py)."""
        entity = view.queues.get(queue)
        ttl = None if entity is None else queue_message_ttl(entity.arguments)
        return QueueExpiry(queue, ttl, self._dead_lettering.dead_letter, self._r.nursery.start_soon)

    async def sweeper(
        self,
        queue: str,
        read_ahead: int,
        *,
        ordered: bool = False,
        subscription_type: SubscriptionType = "shared",
    ) -> PulsarQueueSubscription:
        """A consumer for the leader's TTL sweep (leader/message_ttl_sweep.py), drop-head trim
        (leader/length_trim.py, ``ordered``: a priority queue's head is its highest priority) or
        stream feed (queue_types/stream/feed.py, an ``exclusive`` one) of ``queue``."""
        return await self._subscription(
            queue,
            exclusive=False,
            read_ahead=read_ahead,
            ordered=ordered,
            subscription_type=subscription_type,
        )

    async def _requeue_copies(self, queue: str, copies: Sequence[Copy]) -> None:
        """Write copies of messages (of batches, or chunked) to ``queue``'s own topic (the
        default exchange's: only this queue reads it), in their order, and wait until Pulsar
        stored them all. Each keeps the time its original entered the queue (its TTL runs from
        then); marked requeued (next delivered with ``redelivered=true``) if so."""
        topic = await self._queue_topic_prepared(queue)
        stored = []
        for copy in copies:
            properties = to_pulsar(copy.message)
            properties[ENQUEUED] = str(copy.enqueued)
            if copy.requeued:
                properties[REQUEUED] = "true"
            stored.append(await self._r.producers.submit(topic, copy.message.body, properties))
        for handle in stored:
            await handle.durable()

    async def _write_to_queue(self, queue: str, message: Message) -> None:
        """Write ``message`` to ``queue``'s own topic and wait until Pulsar stored it."""
        topic = await self._queue_topic_prepared(queue)
        stored = await self._r.producers.submit(topic, message.body, to_pulsar(message))
        await stored.durable()

    async def _queue_topic_prepared(self, queue: str) -> str:
        """``queue``'s own topic, ready to keep what is written there for the queue."""
        # With lazy subscriptions that topic has no subscription until something is published
        # to it through the default exchange (activation.py): prepared here as a publisher
        # prepares it, or a copy would be stored where no subscription keeps it, and the
        # original acknowledged: the message lost.
        default = self.catalog.exchange(self.catalog.view, DEFAULT_EXCHANGE)
        if default is not None:
            await self._publish_routes.prepare(default, queue)
        return topic_for(self.namespace, DEFAULT_EXCHANGE, queue)

    async def follow(self) -> None:
        """Keep this replica's consumers in step with the metadata, whichever replica changed
        it: a binding made elsewhere adds its topics to our consumers of the queue, an unbind
        removes them, a queue deleted elsewhere cancels our consumers (Basic.Cancel)."""
        version = self._view.version
        self._drains.refresh(self._view)
        keys = self._view.topic_keys
        while True:
            try:
                view = await self._r.store.changed(self.catalog.namespace, version)
            except KeyError:
                # The vhost was deleted (vhost_admin.py): its metadata is gone on every
                # replica, so are its queues, and their consumers end as for a deleted queue.
                await self._deleted()
                return
            version = view.version
            self._drains.refresh(view)
            if view.topic_keys is not keys:
                keys = view.topic_keys
                self._publish_routes.forget_unregistered(keys)
            try:
                await self._reconcile(view)
            except Exception:
                log.warning(
                    "following metadata changes in vhost %s failed", self.name, exc_info=True
                )

    async def _deleted(self) -> None:
        self.deleted = True
        log.info("vhost %s: its metadata was deleted; its consumers are cancelled", self.name)
        for subscriptions in list(self._consumers.values()):
            for subscription in list(subscriptions):
                await subscription.end()
        for queue in {*self._basic_gets.by_queue, *self._basic_gets.leaving}:
            await self._basic_gets.end(queue)

    async def _reconcile(self, view: VhostView) -> None:
        await self.streams.reconcile(view)
        for queue, subscriptions in list(self._consumers.items()):
            if queue not in view.queues:
                for subscription in list(subscriptions):
                    await subscription.end()
                continue
            wanted = self._topics.read_by(view, queue)
            held = [set(s.consumer.topics) for s in subscriptions]
            for topic in sorted(t for t in wanted if any(t not in h for h in held)):
                await self._subscriptions.subscribe(topic, queue)  # it became active
            for subscription in self._subscriptions.by_priority(queue):
                await self._retopic(subscription, wanted)
        for queue, getter in list(self._basic_gets.by_queue.items()):
            if queue not in view.queues:
                await self._basic_gets.end(queue)  # deleted: closed now (BasicGetConsumers.end)
            else:
                await self._retopic(getter, self._topics.read_by(view, queue))
        for queue in [q for q in self._basic_gets.leaving if q not in view.queues]:
            await self._basic_gets.end(queue)

    @staticmethod
    async def _retopic(subscription: PulsarQueueSubscription, wanted: set[str]) -> None:
        current = set(subscription.consumer.topics)
        for topic in wanted - current:
            await subscription.add_topic(topic)
        for topic in current - wanted:
            await subscription.remove_topic(topic)

    async def consume(
        self,
        command: cmd.BasicConsume,
        owner: Owner,
        *,
        prefetch: int = 0,
        qos: ConsumerQos = NO_QOS,
    ) -> QueueSubscription:
        entity = await self.catalog.find_queue(command.queue, owner)
        self.catalog.check_consume(entity, command)
        request = ConsumeRequest(command, prefetch, qos)
        return await type_of(entity.arguments).consume(self, entity, request)

    async def consume_subscribed(self, entity: Queue, request: ConsumeRequest) -> QueueSubscription:
        """A consumer of a queue read through subscriptions, as the queue's consumer strategy
        has it (consumers/strategy.py): in its single-active line, or competing."""
        await self._queue_use.used(entity.name, entity.arguments)
        return await strategy_of(entity.arguments).consume(self, entity, request)

    async def consume_competing(self, entity: Queue, request: ConsumeRequest) -> QueueSubscription:
        """One of the queue's competing consumers (highest ``x-priority`` first)."""
        command, prefetch = request.command, request.prefetch
        queue, exclusive = entity.name, command.exclusive
        priority = consumer_priority(command.arguments)
        if "x-priority" in command.arguments and not priority_levels().available:
            where = resource("queue", queue, self.name)
            raise refuse_priority(where, priority_levels().why_not)
        existing = self._consumers.get(queue, set())
        if any(s.exclusive for s in existing) or (exclusive and existing):
            raise self.catalog.exclusive_use(queue)  # known here, no need to ask the store
        # Registered before it consumes: the store refuses (403) a consumer that an exclusive
        # one on any replica excludes, and counts it for Declare-Ok and auto-delete.
        store = self._r.store
        registration = await self.catalog.write(
            store.add_consumer(self.catalog.namespace, queue, exclusive=exclusive)
        )
        try:
            # Messages the Basic.Get consumer holds would never reach this consumer.
            await self._basic_gets.close(queue)
            subscription = await self._subscription(
                queue,
                exclusive=exclusive,
                prefetch=prefetch,
                priority=priority,
                shares_batches=not exclusive,
            )
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._unregister(queue, registration)
            raise
        self._consumers.setdefault(queue, set()).add(subscription)
        self._registrations[subscription] = registration
        await self._catch_up(queue, subscription)
        return RegisteredSubscription(subscription, lambda: self._settled(subscription))

    async def _catch_up(self, queue: str, subscription: PulsarQueueSubscription) -> None:
        """Topics of ``queue`` that became active while ``subscription`` was being made (it
        read them from the view before, and was not among the consumers given new ones)."""
        missing = self._topics.read_by(self._view, queue) - set(subscription.consumer.topics)
        for topic in sorted(missing):
            try:
                await self._subscriptions.subscribe(topic, queue)
            except AMQPError as error:  # the next change of the view tries again
                log.warning("giving %s to a consumer of '%s' failed: %s", topic, queue, error)

    @property
    def nursery(self) -> trio.Nursery:
        """For work that outlives a request (a single-active line's following)."""
        return self._r.nursery

    async def open_active_consumer(self, queue: str, prefetch: int) -> PulsarQueueSubscription:
        """The Pulsar consumer of the head of ``queue``'s single-active line, while it is the
        head (consumers/single_active.py)."""
        await self._basic_gets.close(queue)  # what it holds would never reach this one
        subscription = await self._subscription(queue, exclusive=False, prefetch=prefetch)
        self._consumers.setdefault(queue, set()).add(subscription)
        await self._catch_up(queue, subscription)
        return subscription

    async def line_consumer_gone(self, queue: str, registration: str) -> None:
        """A consumer left ``queue``'s single-active line."""
        now = self._view.queues.get(queue)
        await self._consumer_gone(queue, registration, now is not None and now.auto_delete)

    async def _settled(self, subscription: PulsarQueueSubscription) -> None:
        """Until the closed consumer's unregistration (and auto-delete) is done."""
        leaving = self._leaving.get(subscription)
        if leaving is not None:
            with trio.move_on_after(GONE_WAIT):
                await leaving.wait()

    def _consumer_closed(self, subscription: PulsarQueueSubscription) -> None:
        registration = self._registrations.pop(subscription, None)
        consumers = self._consumers.get(subscription.queue)
        if consumers is not None and subscription in consumers:
            consumers.discard(subscription)
            if not consumers:
                del self._consumers[subscription.queue]
            if not subscription.close_done.is_set():
                # Cancelled, still open (deliveries of it unsettled: ``retire``) or still
                # closing: held until closed, for its queue's deletion to close it before
                # removing the subscriptions (held_until_closed.py). An auto-delete queue goes
                # as its last consumer leaves, and the subscription that consumer created anew
                # went to a queue declared again under the name, with what had been routed to
                # the old one since (a Get found it: the Java client's
                # exchangeAutoDeleteManyBindings, issue 34).
                self._retired.hold(subscription.queue, subscription)
        if registration is None:
            return  # the Basic.Get consumer, or closed before Consume-Ok
        queue = self._view.queues.get(subscription.queue)
        # An auto-delete queue goes when its last consumer on any replica does (not when the
        # queue itself went: ``ended``).
        abandoned = queue is not None and queue.auto_delete and not subscription.ended
        done = self._leaving[subscription] = trio.Event()

        async def gone() -> None:
            try:
                await self._consumer_gone(subscription.queue, registration, abandoned, done)
            finally:
                self._leaving.pop(subscription, None)

        self._r.nursery.start_soon(gone)

    async def _unregister(self, queue: str, registration: str) -> None:
        try:
            await self._r.store.remove_consumer(self.catalog.namespace, queue, registration)
        except Exception as error:  # it goes with our session at the latest
            log.warning("unregistering a consumer of queue '%s' failed: %s", queue, error)

    async def _consumer_gone(
        self, name: str, registration: str, abandoned: bool, done: trio.Event | None = None
    ) -> None:
        try:
            await self._unregister(name, registration)
            if not abandoned or self._consumers.get(name):
                return
            # The store checks that no replica has a consumer left (and that the queue ever
            # had one), atomically with the delete.
            await self.drop_queue(name, condition=QueueCondition.ABANDONED)
        except ConditionNotMet:
            pass  # a consumer remains (or came) somewhere
        except Exception:
            log.warning(
                "auto-deleting queue '%s' in vhost '%s' failed", name, self.name, exc_info=True
            )
        finally:
            if done is not None:
                done.set()

    async def get(self, command: cmd.BasicGet, owner: Owner) -> tuple[Delivery, int] | None:
        entity = await self.catalog.find_queue(command.queue, owner)
        return await type_of(entity.arguments).get(self, entity, owner)

    async def get_subscribed(
        self, entity: Queue, owner: Owner
    ) -> tuple[PulsarDelivery, int] | None:
        """Basic.Get from a queue read through subscriptions (basic_get.py)."""
        queue = entity.name
        self.catalog.check_get(entity)
        await self._queue_use.used(queue, entity.arguments)
        await self._subscriptions.gives_done(queue)
        return await self._basic_gets.get(queue, lambda: self.catalog.find_queue(queue, owner))

    async def release(self, owner: Owner) -> None:
        for name in self.catalog.owned_by(owner):
            try:
                await self.drop_queue(name)
            except Exception:
                log.warning("deleting exclusive queue '%s' failed", name, exc_info=True)

    async def aclose(self) -> None:
        for subscriptions in list(self._consumers.values()):
            for subscription in list(subscriptions):
                await subscription.close()
        await self._basic_gets.aclose()
        await self.streams.aclose()
