"""One vhost on Pulsar: entities in the metadata store, messages in the namespace's topics.

The mapping (reference/002, DESIGN.md, docs/mapping.md): an exchange is a topic, and for direct
and topic exchanges the routing key is part of the topic's name; a binding is the queue's
Shared subscription on each topic the binding covers; every queue is bound to the default
exchange's ``amq.default__<queue>`` topic.

Ordering that makes routing race-free on one replica: a subscription is created before the
binding (or queue) that needs it becomes visible, and a topic exchange's new routing key is
registered, and the subscriptions of the patterns it matches created, before the first
message is written to its topic.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any, TypeVar

import trio

from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.amqp.fieldtable import Field
from gateway.backend.catalog import Catalog, CatalogVirtualHost
from gateway.backend.interface import Message, Owner, PublishOutcome, QueueStatus
from gateway.backend.pulsar.delivery import Admits, PulsarDelivery, PulsarQueueSubscription
from gateway.backend.pulsar.drains import Drains, Position, position_of
from gateway.backend.pulsar.messages import to_pulsar
from gateway.backend.pulsar.redeliveries import Redeliveries
from gateway.backend.pulsar.resources import PulsarResources
from gateway.metadata.store import VhostView
from gateway.model.entities import (
    DEFAULT_EXCHANGE,
    PREDECLARED_EXCHANGES,
    Binding,
    Exchange,
    ExchangeType,
    resource,
)
from gateway.model.naming import decode_local_name, subscription_for, topic_for
from gateway.model.routing import (
    binding_topics,
    compile_topic,
    headers_match,
    publish_topic,
)
from gateway.model.vhost import Namespace
from gateway.pulsar.consumer import ConsumerOptions, ReceivedMessage
from gateway.pulsar.errors import (
    AdminError,
    NotFound,
    PreconditionFailed,
    PulsarClientError,
    to_amqp_error,
)

log = logging.getLogger("gateway.pulsar.vhost")

T = TypeVar("T")

_PREDECLARED = {exchange.name: exchange for exchange in PREDECLARED_EXCHANGES}
# How long Basic.Get waits for a message on its way from Pulsar before answering Get-Empty.
GET_WAIT = 0.25
# Tries at creating a subscription that another replica is creating at the same moment.
SUBSCRIBE_ATTEMPTS = 5
# A Basic.Get consumer unused this long is closed (its prefetched messages go back).
GETTER_IDLE = 1.0


class PulsarVirtualHost(CatalogVirtualHost):
    def __init__(self, name: str, namespace: Namespace, resources: PulsarResources) -> None:
        self.name = name
        self.namespace = namespace
        self._r = resources
        self.catalog = Catalog(name, str(namespace), resources.store)
        self._consumers: dict[str, set[PulsarQueueSubscription]] = {}
        self._getters: dict[str, PulsarQueueSubscription] = {}
        self._prepared_keys: set[tuple[str, str]] = set()
        self._drains = Drains()
        self._draining = False
        self._redeliveries = Redeliveries()
        # Per (queue, topic): the topic's last entry at the latest purge. Messages up to it
        # that consumers had prefetched before the purge are dropped when they come through.
        self._purged: dict[tuple[str, str], Position] = {}
        self._getter_used: dict[str, float] = {}
        self._sweeping_getters = False

    # ------------------------------------------------------------------ helpers

    @property
    def _view(self) -> VhostView:
        return self.catalog.view

    async def _pulsar(self, call: Awaitable[T], what: str) -> T:
        try:
            return await call
        except Exception as error:  # admin and client errors become AMQP errors, never hangs
            raise to_amqp_error(error, what) from None

    def _binding_topics(self, view: VhostView, binding: Binding) -> list[str]:
        exchange = self.catalog.exchange(view, binding.exchange)
        if exchange is None:
            return []
        keys = view.topic_keys.get(binding.exchange, frozenset())
        return binding_topics(self.namespace, exchange, binding, keys)

    def _bound_topics(self, view: VhostView, queue: str) -> set[str]:
        """The topics the queue's bindings (and the default exchange) route into."""
        topics = {topic_for(self.namespace, DEFAULT_EXCHANGE, queue)}
        for binding in view.bindings:
            if binding.queue == queue:
                topics.update(self._binding_topics(view, binding))
        return topics

    def _queue_topics(self, view: VhostView, queue: str) -> set[str]:
        """Every topic the queue reads: bound ones, and unbound ones still draining."""
        return self._bound_topics(view, queue) | self._drains.topics_of(queue)

    async def _subscribe_topic(self, topic: str, queue: str) -> None:
        what = f"subscribing queue '{queue}' to {topic}"
        for attempt in range(SUBSCRIBE_ATTEMPTS):
            try:
                await self._r.admin.create_subscription(topic, subscription_for(queue), "latest")
                break
            except PreconditionFailed as error:
                # Two replicas creating the same subscription at once: Pulsar answers the
                # second "Subscription Busy" (412) while the first completes. Once it has,
                # the next attempt finds it (409, fine).
                if attempt == SUBSCRIBE_ATTEMPTS - 1:
                    raise to_amqp_error(error, what) from None
                await trio.sleep(0.05 * (attempt + 1))
            except Exception as error:
                raise to_amqp_error(error, what) from None
        for subscription in self._consumers.get(queue, ()):
            await subscription.add_topic(topic)

    async def _unsubscribe_topic(self, topic: str, queue: str) -> None:
        for subscription in self._consumers.get(queue, ()):
            await subscription.remove_topic(topic)
        getter = self._getters.get(queue)
        if getter is not None:
            await getter.remove_topic(topic)
        await self._pulsar(
            self._r.admin.delete_subscription(topic, subscription_for(queue), force=True),
            f"unsubscribing queue '{queue}' from {topic}",
        )

    # ------------------------------------------------------------------ exchanges

    async def delete_exchange(self, name: str, *, if_unused: bool) -> None:
        view = self._view
        bindings = await self.catalog.delete_exchange(name, if_unused=if_unused)
        topics = {b: self._binding_topics(view, b) for b in bindings}
        await self._drop_subscriptions(self._view, topics)

    async def _drop_subscriptions(
        self, view: VhostView, topics: Mapping[Binding, Iterable[str]]
    ) -> None:
        """Bindings are gone: each queue leaves the topics none of its other bindings need,
        once it has consumed what was routed to it there (see drains.py)."""
        for binding, binding_topics_ in topics.items():
            still_needed = self._bound_topics(view, binding.queue)
            for topic in binding_topics_:
                if topic not in still_needed:
                    await self._start_drain(binding.queue, topic)

    async def _start_drain(self, queue: str, topic: str) -> None:
        admin = self._r.admin
        try:
            backlog = await admin.subscription_backlog(topic, subscription_for(queue))
        except NotFound:
            return
        except AdminError as error:
            raise to_amqp_error(error, f"unbinding queue '{queue}'") from None
        if backlog == 0:
            await self._unsubscribe_topic(topic, queue)
            return
        end = await self._pulsar(admin.last_message_id(topic), f"unbinding queue '{queue}'")
        self._drains.start(queue, topic, end)
        if not self._draining:
            self._draining = True
            self._r.nursery.start_soon(self._drain_loop)

    async def _drain_loop(self) -> None:
        """Remove drained subscriptions, checking every ``drain_check_interval`` seconds."""
        try:
            while self._drains:
                await trio.sleep(self._r.drain_check_interval)
                for (queue, topic), drain in self._drains.items():
                    try:
                        backlog = await self._r.admin.subscription_backlog(
                            topic, subscription_for(queue)
                        )
                    except NotFound:
                        self._drains.finish(queue, topic)
                        continue
                    except AdminError:
                        continue  # Pulsar is busy or away: try again next round
                    if backlog:
                        continue
                    self._drains.finish(queue, topic)
                    if drain.resumed is None:
                        await self._unsubscribe_topic(topic, queue)
        except Exception:
            log.warning("draining unbound subscriptions failed", exc_info=True)
        finally:
            self._draining = False

    # ------------------------------------------------------------------ queues

    async def declare_queue(
        self,
        name: str,
        *,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: Mapping[str, Any],
        owner: Owner,
    ) -> QueueStatus:
        async def subscribe_default() -> None:
            # The default exchange's subscription exists before anyone can see the queue.
            await self._subscribe_topic(topic_for(self.namespace, DEFAULT_EXCHANGE, name), name)

        _queue, created = await self.catalog.declare_queue(
            name,
            passive=passive,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=arguments,
            owner=owner,
            before_create=subscribe_default,
        )
        if created:
            return QueueStatus(name, 0, 0)
        return await self._status(self._view, name)

    async def _status(self, view: VhostView, queue: str) -> QueueStatus:
        consumers = len(self._consumers.get(queue, ()))
        return QueueStatus(queue, await self._message_count(view, queue), consumers)

    async def _message_count(self, view: VhostView, queue: str) -> int:
        """Messages ready in the queue, as AMQP counts them (not awaiting an ack).

        Pulsar's backlog counts batch entries and includes unacknowledged messages: the broker
        is asked to count the messages, and those delivered to clients and not yet settled
        are taken off.
        """
        total = 0
        subscription = subscription_for(queue)
        admin = self._r.admin
        for topic in self._queue_topics(view, queue):
            stats = await self._pulsar(admin.topic_stats(topic), f"counting '{queue}'")
            found = stats.subscriptions.get(subscription)
            if found is None or found.msg_backlog == 0:
                continue
            analysis = await self._pulsar(
                admin.analyze_backlog(topic, subscription), f"counting '{queue}'"
            )
            total += analysis.messages
        # Messages a client holds unacknowledged are not ready; Pulsar's own unacked figure
        # would also take off what consumers merely prefetched. (Those of other replicas'
        # clients are not known here.)
        held = sum(s.outstanding for s in self._consumers.get(queue, ()))
        getter = self._getters.get(queue)
        if getter is not None:
            held += getter.outstanding
        return max(0, total - held)

    async def delete_queue(
        self, name: str, *, if_unused: bool, if_empty: bool, owner: Owner
    ) -> int:
        view = self._view
        if name not in view.queues:
            return 0  # idempotent, as in RabbitMQ
        self.catalog.queue(view, name, owner)
        where = resource("queue", name, self.name)
        if if_unused and self._consumers.get(name):
            raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"{where} in use")
        count = await self._message_count(view, name)
        if if_empty and count:
            raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"{where} not empty")
        await self._drop_queue(view, name)
        return count

    async def _drop_queue(self, view: VhostView, name: str) -> None:
        topics = self._queue_topics(view, name)
        self._drains.forget_queue(name)
        await self.catalog.delete_queue(name)
        for subscription in list(self._consumers.pop(name, ())):
            await subscription.end()
        await self._close_getter(name)
        self._purged = {key: at for key, at in self._purged.items() if key[0] != name}
        for topic in topics:
            await self._pulsar(
                self._r.admin.delete_subscription(topic, subscription_for(name), force=True),
                f"deleting queue '{name}'",
            )

    async def purge_queue(self, name: str, *, owner: Owner) -> int:
        view = self._view
        self.catalog.queue(view, name, owner)
        count = await self._message_count(view, name)
        await self._close_getter(name)
        admin = self._r.admin
        for topic in self._queue_topics(view, name):
            last = await self._pulsar(admin.last_message_id(topic), f"purging '{name}'")
            self._purged[(name, topic)] = position_of(last)
            await self._pulsar(admin.skip_all(topic, subscription_for(name)), f"purging '{name}'")
        return count

    # ------------------------------------------------------------------ bindings

    async def bind_queue(
        self,
        queue: str,
        exchange: str,
        routing_key: str,
        arguments: Mapping[str, Field],
        *,
        owner: Owner,
    ) -> None:
        binding, target = self.catalog.binding(queue, exchange, routing_key, arguments, owner)
        # Subscriptions first, so a publisher that sees the binding finds them in place.
        subscribed = self._binding_topics(self._view, binding)
        for topic in subscribed:
            if self._drains.get(queue, topic) is not None:
                last = await self._pulsar(self._r.admin.last_message_id(topic), "binding")
                self._drains.rebound(queue, topic, last)
            await self._subscribe_topic(topic, queue)
        await self.catalog.add_binding(binding)
        if target.type is ExchangeType.TOPIC:
            # Keys registered while we subscribed: the publisher of a new key looks for
            # bindings after registering it, and we look for keys after binding.
            for topic in set(self._binding_topics(self._view, binding)) - set(subscribed):
                await self._subscribe_topic(topic, queue)

    async def unbind_queue(
        self,
        queue: str,
        exchange: str,
        routing_key: str,
        arguments: Mapping[str, Field],
        *,
        owner: Owner,
    ) -> None:
        before = self._view
        removed = await self.catalog.remove_binding(queue, exchange, routing_key, arguments, owner)
        if removed is not None:
            topics = self._binding_topics(before, removed)
            await self._drop_subscriptions(self._view, {removed: topics})

    # ------------------------------------------------------------------ publishing

    async def publish(self, message: Message) -> PublishOutcome:
        view = self._view
        exchange = self.catalog.publish_target(view, message.exchange)
        key = message.routing_key
        if exchange.type is ExchangeType.TOPIC and (exchange.name, key) not in self._prepared_keys:
            await self._prepare_topic_key(exchange, key)
            view = self._view
        routed = bool(self.catalog.routes(view, exchange, message))
        # Written even when this replica's view routes it nowhere: a binding made on another
        # replica may not have reached the view yet, and Pulsar drops a message that no
        # subscription wants anyway.
        topic = publish_topic(self.namespace, exchange, key)
        try:
            stored = await self._r.producers.submit(topic, message.body, to_pulsar(message))
        except PulsarClientError as error:
            raise to_amqp_error(error, f"publishing to {topic}") from None
        return PublishOutcome(routed=routed, stored=stored)

    async def _prepare_topic_key(self, exchange: Exchange, key: str) -> None:
        """A topic exchange's key gets its own topic: before its first message, every pattern
        binding that matches the key must have its subscription there."""
        await self.catalog.write(
            self._r.store.register_topic_key(self.catalog.namespace, exchange.name, key)
        )
        view = self._view
        topic = topic_for(self.namespace, exchange.name, key)
        for binding in self.catalog.router(view, exchange).patterns_matching(key):
            if compile_topic(binding.routing_key).shape != "literal":
                await self._subscribe_topic(topic, binding.queue)
        self._prepared_keys.add((exchange.name, key))

    # ------------------------------------------------------------------ consuming

    def _admits(self, queue: str) -> Admits:
        def admits(message: Message, received: ReceivedMessage) -> bool:
            topic = received.topic
            drain = self._drains.get(queue, topic)
            if drain is not None and drain.excludes(position_of(received.message_id)):
                return False  # written while the queue was not bound to this topic
            purged = self._purged.get((queue, topic))
            if (
                purged is not None
                and position_of(received.message_id) <= purged
                and not self._redeliveries.seen(received)
            ):
                return False  # prefetched before a purge (an unacked one survives it)
            decoded = decode_local_name(topic.rsplit("/", 1)[-1])
            if decoded is None or decoded[1] is not None:
                return True  # keyed topics (direct, topic, default) carry only routed messages
            view = self._view
            exchange = self.catalog.exchange(view, decoded[0])
            if exchange is None or exchange.type is not ExchangeType.HEADERS:
                return True
            headers = message.properties.headers
            return any(
                headers_match(b.arguments, headers)
                for b in view.bindings
                if b.queue == queue and b.exchange == exchange.name
            )

        return admits

    async def _subscription(
        self, queue: str, *, exclusive: bool, receiver_queue_size: int
    ) -> PulsarQueueSubscription:
        topics = sorted(self._queue_topics(self._view, queue))
        consumer = await self._pulsar(
            self._r.client.subscribe(
                topics,
                subscription_for(queue),
                ConsumerOptions(receiver_queue_size=receiver_queue_size),
            ),
            f"consuming from '{queue}'",
        )
        return PulsarQueueSubscription(
            queue,
            consumer,
            self._admits(queue),
            self._consumer_closed,
            self._redeliveries,
            exclusive=exclusive,
        )

    async def follow(self) -> None:
        """Keep this replica's consumers in step with the metadata, whichever replica changed
        it: a binding made elsewhere adds its topics to our consumers of the queue, an unbind
        removes them, a queue deleted elsewhere cancels our consumers (Basic.Cancel)."""
        version = self._view.version
        while True:
            view = await self._r.store.changed(self.catalog.namespace, version)
            version = view.version
            try:
                await self._reconcile(view)
            except Exception:
                log.warning(
                    "following metadata changes in vhost %s failed", self.name, exc_info=True
                )

    async def _reconcile(self, view: VhostView) -> None:
        for queue, subscriptions in list(self._consumers.items()):
            if queue not in view.queues:
                for subscription in list(subscriptions):
                    await subscription.end()
                continue
            wanted = self._queue_topics(view, queue)
            for subscription in list(subscriptions):
                await self._retopic(subscription, wanted)
        for queue, getter in list(self._getters.items()):
            if queue not in view.queues:
                await self._close_getter(queue)
            else:
                await self._retopic(getter, self._queue_topics(view, queue))

    @staticmethod
    async def _retopic(subscription: PulsarQueueSubscription, wanted: set[str]) -> None:
        current = set(subscription.consumer.topics)
        for topic in wanted - current:
            await subscription.add_topic(topic)
        for topic in current - wanted:
            await subscription.remove_topic(topic)

    async def consume(
        self, queue: str, *, exclusive: bool, owner: Owner
    ) -> PulsarQueueSubscription:
        self.catalog.queue(self._view, queue, owner)
        existing = self._consumers.get(queue, set())
        if any(s.exclusive for s in existing) or (exclusive and existing):
            raise ChannelError(
                ReplyCode.ACCESS_REFUSED, f"{resource('queue', queue, self.name)} in exclusive use"
            )
        # Messages the Basic.Get consumer holds would never reach this consumer.
        await self._close_getter(queue)
        subscription = await self._subscription(
            queue, exclusive=exclusive, receiver_queue_size=self._r.receiver_queue_size
        )
        self._consumers.setdefault(queue, set()).add(subscription)
        return subscription

    def _consumer_closed(self, subscription: PulsarQueueSubscription) -> None:
        consumers = self._consumers.get(subscription.queue)
        if consumers is None or subscription not in consumers:
            return
        consumers.discard(subscription)
        if consumers:
            return
        del self._consumers[subscription.queue]
        queue = self._view.queues.get(subscription.queue)
        if queue is not None and queue.auto_delete and not subscription.ended:
            # An auto-delete queue goes when its last consumer does.
            self._r.nursery.start_soon(self._auto_delete, queue.name)

    async def _auto_delete(self, name: str) -> None:
        try:
            if name in self._view.queues and not self._consumers.get(name):
                await self._drop_queue(self._view, name)
        except Exception:
            log.warning(
                "auto-deleting queue '%s' in vhost '%s' failed", name, self.name, exc_info=True
            )

    async def get(self, queue: str, *, owner: Owner) -> tuple[PulsarDelivery, int] | None:
        self.catalog.queue(self._view, queue, owner)
        getter = self._getters.get(queue)
        if getter is None or getter.closed:
            # One small consumer per queue serves the Basic.Gets of a burst: none is created
            # per call, and it goes when idle so it does not hold messages back from others.
            getter = await self._subscription(queue, exclusive=False, receiver_queue_size=1)
            self._getters[queue] = getter
            if not self._sweeping_getters:
                self._sweeping_getters = True
                self._r.nursery.start_soon(self._sweep_getters)
        self._getter_used[queue] = trio.current_time()
        delivery = getter.receive_nowait()
        if delivery is None:
            with trio.move_on_after(GET_WAIT):
                delivery = await getter.receive()
        if delivery is None:
            return None
        return delivery, getter.consumer.buffered

    async def _close_getter(self, queue: str) -> None:
        """Retire the queue's Basic.Get consumer: what it prefetched goes back to the queue
        at once, and it closes when the messages it handed out are settled."""
        getter = self._getters.pop(queue, None)
        self._getter_used.pop(queue, None)
        if getter is not None:
            getter.retire(lambda: self._r.nursery.start_soon(getter.close))

    async def _sweep_getters(self) -> None:
        try:
            while self._getters:
                await trio.sleep(GETTER_IDLE / 2)
                now = trio.current_time()
                for queue, used in list(self._getter_used.items()):
                    if now - used >= GETTER_IDLE:
                        await self._close_getter(queue)
        finally:
            self._sweeping_getters = False

    async def release(self, owner: Owner) -> None:
        view = self._view
        for queue in list(view.queues.values()):
            if queue.owner == owner.connection_id:
                try:
                    await self._drop_queue(self._view, queue.name)
                except Exception:
                    log.warning("deleting exclusive queue '%s' failed", queue.name, exc_info=True)

    async def aclose(self) -> None:
        for subscriptions in list(self._consumers.values()):
            for subscription in list(subscriptions):
                await subscription.close()
        for getter in list(self._getters.values()):
            await getter.close()
        self._getters.clear()
