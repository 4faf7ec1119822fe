"""The channel logic of one connection: what exchange, queue, basic and confirm methods do.

The sans-IO core has already checked framing and channel states; this module gives the
methods their meaning on top of a ``VirtualHost`` backend: delivery tags, prefetch credit,
acknowledgements, publisher confirms, and giving unacknowledged messages back when a channel,
consumer or connection goes away. Refusals are ``AMQPError``s with RabbitMQ's codes and texts;
the connection turns them into Channel.Close or Connection.Close.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio
from pamqp import commands

from gateway.amqp import events as ev
from gateway.amqp.codec import method_name
from gateway.amqp.connection import ServerConnection
from gateway.amqp.errors import AMQPError, ReplyCode, amqp_error
from gateway.backend.interface import (
    Delivery,
    Message,
    Owner,
    PublishOutcome,
    QueueSubscription,
    SubscriptionEnded,
    VirtualHost,
)
from gateway.model.entities import check_queue_declare, strip_cr_lf
from gateway.model.naming import server_named_queue
from gateway.model.publishing import check_user_id
from gateway.observability.counters import COUNTERS, VhostCounters
from gateway.server.confirms import ConfirmQueue
from gateway.server.stall_watch import StallWatch

log = logging.getLogger("gateway.session")

# Cleanup (requeueing, closing subscriptions) must finish even when the connection is being
# torn down, but never hang the teardown.
CLEANUP_TIMEOUT = 10.0
# A publish that waits this long for the backend (Pulsar's in-flight limit reached) tells the
# client, if it listens, with Connection.Blocked; Unblocked follows when the publish goes on.
BLOCKED_AFTER = 1.0


class SessionLink(Protocol):
    """What the session needs from its connection."""

    protocol: ServerConnection
    owner: Owner
    nursery: trio.Nursery

    async def flush(self) -> None: ...

    async def fail(self, channel: int, error: AMQPError) -> None:
        """Close ``channel`` (soft error) or the connection (hard error) from a background task."""
        ...


@dataclass(eq=False)
class Consumer:
    tag: str
    queue: str
    no_ack: bool
    prefetch: int  # 0 = unlimited (Basic.Qos global=false at the time of Basic.Consume)
    subscription: QueueSubscription
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    unacked: int = 0


@dataclass(eq=False)
class Unacked:
    delivery: Delivery
    consumer: Consumer | None  # None for Basic.Get


@dataclass(eq=False)
class ChannelState:
    number: int
    next_tag: int = 1
    unacked: dict[int, Unacked] = field(default_factory=dict)
    consumers: dict[str, Consumer] = field(default_factory=dict)
    consumer_prefetch: int = 0
    channel_prefetch: int = 0  # Basic.Qos global=true: shared by all consumers of the channel
    flow_active: bool = True
    confirms: ConfirmQueue | None = None
    confirm_scope: trio.CancelScope | None = None
    last_queue: str = ""  # for the empty queue name meaning "the last one declared here"
    # Tags whose deliveries were given back when their consumer was cancelled: the client may
    # still ack them, and that must not be an unknown-tag error.
    forgotten: set[int] = field(default_factory=set)
    credit_changed: trio.Event = field(default_factory=trio.Event)
    publisher: bool = False  # has published: one of rabbitmq_global_publishers

    def take_tag(self) -> int:
        tag = self.next_tag
        self.next_tag += 1
        return tag

    def signal_credit(self) -> None:
        self.credit_changed.set()
        self.credit_changed = trio.Event()

    def consumers_unacked(self) -> int:
        return sum(c.unacked for c in self.consumers.values())

    def prefetch_window(self) -> int:
        """The most unacknowledged deliveries a consumer started now can hold (0: no limit)."""
        limits = [limit for limit in (self.consumer_prefetch, self.channel_prefetch) if limit]
        return min(limits, default=0)

    def has_credit(self, consumer: Consumer) -> bool:
        if not self.flow_active:
            return False
        if consumer.no_ack:
            return True  # Basic.Qos does not apply to no-ack consumers (RabbitMQ)
        if consumer.prefetch and consumer.unacked >= consumer.prefetch:
            return False
        return not (self.channel_prefetch and self.consumers_unacked() >= self.channel_prefetch)

    async def wait_for_credit(self, consumer: Consumer) -> None:
        while not self.has_credit(consumer):
            await self.credit_changed.wait()


def _error_for(method: Any, code: int, text: str) -> AMQPError:
    index = method.index
    return amqp_error(code, text, index >> 16, index & 0xFFFF)


class AMQPSession:
    def __init__(
        self, vhost: VirtualHost, link: SessionLink, counts: VhostCounters | None = None
    ) -> None:
        """``counts``: the vhost's counters (docs/observability.md); the publish, deliver and
        ack paths add to its plain int attributes, which costs a few increments a message."""
        self._vhost = vhost
        self._link = link
        self._counts = counts if counts is not None else VhostCounters("")
        self._protocol = link.protocol
        self._stalls = StallWatch(BLOCKED_AFTER, link.protocol, link.flush)
        self._channels: dict[int, ChannelState] = {}
        self._handlers: dict[int, Callable[[ChannelState, Any], Awaitable[None]]] = {
            commands.Exchange.Declare.index: self._exchange_declare,
            commands.Exchange.Delete.index: self._exchange_delete,
            commands.Queue.Declare.index: self._queue_declare,
            commands.Queue.Bind.index: self._queue_bind,
            commands.Queue.Unbind.index: self._queue_unbind,
            commands.Queue.Purge.index: self._queue_purge,
            commands.Queue.Delete.index: self._queue_delete,
            commands.Basic.Qos.index: self._basic_qos,
            commands.Basic.Consume.index: self._basic_consume,
            commands.Basic.Cancel.index: self._basic_cancel,
            commands.Basic.Get.index: self._basic_get,
            commands.Basic.Recover.index: self._basic_recover,
            commands.Basic.RecoverAsync.index: self._basic_recover,
            commands.Confirm.Select.index: self._confirm_select,
        }

    # ------------------------------------------------------------------ event entry points

    async def handle(self, event: ev.Event) -> None:
        if isinstance(event, ev.PublishReceived):
            await self._publish(event)
        elif isinstance(event, ev.AckReceived):
            await self._settle(event.channel, event.delivery_tag, event.multiple, None)
        elif isinstance(event, ev.NackReceived):
            await self._settle(event.channel, event.delivery_tag, event.multiple, event.requeue)
        elif isinstance(event, ev.RejectReceived):
            await self._settle(event.channel, event.delivery_tag, False, event.requeue)
        elif isinstance(event, ev.MethodReceived):
            await self._method(event.channel, event.method)
        elif isinstance(event, ev.ChannelOpened):
            self._channels[event.channel] = ChannelState(event.channel)
            self._counts.channels += 1
            COUNTERS.channels_opened += 1
        elif isinstance(event, ev.FlowRequested):
            state = self._channels.get(event.channel)
            if state is not None:
                state.flow_active = event.active
                state.signal_credit()
        elif isinstance(event, ev.ChannelErrored | ev.ChannelClosed):
            if isinstance(event, ev.ChannelErrored):
                COUNTERS.protocol_error(event.error.reply_code)
            await self.channel_closed(event.channel)

    async def channel_closed(self, channel: int) -> None:
        """The channel is closing or closed: stop its work and give its messages back."""
        state = self._channels.pop(channel, None)
        if state is not None:
            counts = self._counts
            counts.channels -= 1
            COUNTERS.channels_closed += 1
            if state.publisher:
                counts.publishers -= 1
            counts.consumers -= len(state.consumers)
            await self._release_channel(state)

    async def close(self) -> None:
        for channel in list(self._channels):
            await self.channel_closed(channel)
        with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
            scope.shield = True
            await self._vhost.release(self._link.owner)

    # ------------------------------------------------------------------ dispatch

    async def _method(self, channel: int, method: Any) -> None:
        state = self._channels.get(channel)
        if state is None:
            return  # the channel closed while this method was queued behind others
        handler = self._handlers.get(method.index)
        if handler is None:
            raise _error_for(
                method,
                ReplyCode.NOT_IMPLEMENTED,
                f"{method_name(method)} is not supported by this gateway",
            )
        try:
            await handler(state, method)
        except AMQPError as error:
            raise error.with_method(method.index >> 16, method.index & 0xFFFF) from None

    def _reply(self, state: ChannelState, method: Any, reply: Any) -> None:
        if not getattr(method, "nowait", False):
            self._protocol.send_method(state.number, reply)

    def _queue_name(self, state: ChannelState, name: str) -> str:
        """AMQP 0-9-1: an empty queue name means the last queue declared on the channel."""
        if name:
            return name
        if not state.last_queue:
            raise amqp_error(ReplyCode.NOT_FOUND, "no previously declared queue")
        return state.last_queue

    # ------------------------------------------------------------------ exchanges and queues
    # RabbitMQ strips CR and LF from the entity names of declare, delete, bind and unbind
    # (rabbit_channel:strip_cr_lf), and not from those of publish, consume, get and purge.

    async def _exchange_declare(self, state: ChannelState, method: Any) -> None:
        await self._vhost.declare_exchange(
            strip_cr_lf(method.exchange),
            method.exchange_type,
            passive=method.passive,
            durable=method.durable,
            auto_delete=method.auto_delete,
            internal=method.internal,
            arguments=method.arguments or {},
        )
        self._reply(state, method, commands.Exchange.DeclareOk())

    async def _exchange_delete(self, state: ChannelState, method: Any) -> None:
        await self._vhost.delete_exchange(strip_cr_lf(method.exchange), if_unused=method.if_unused)
        self._reply(state, method, commands.Exchange.DeleteOk())

    async def _queue_declare(self, state: ChannelState, method: Any) -> None:
        name = strip_cr_lf(method.queue)
        if name:
            # The name rules need no lookup; server-named queues are exempt from them.
            check_queue_declare(name, passive=method.passive)
        name = name or server_named_queue()
        status = await self._vhost.declare_queue(
            name,
            passive=method.passive,
            durable=method.durable,
            exclusive=method.exclusive,
            auto_delete=method.auto_delete,
            arguments=method.arguments or {},
            owner=self._link.owner,
        )
        state.last_queue = status.name
        COUNTERS.queues_declared += 1
        if status.created:
            COUNTERS.queues_created += 1
        if not method.nowait:
            self._protocol.send_queue_declare_ok(
                state.number, status.name, status.message_count, status.consumer_count
            )

    async def _queue_bind(self, state: ChannelState, method: Any) -> None:
        queue = self._queue_name(state, strip_cr_lf(method.queue))
        # With both the queue and the routing key empty, the key is the queue's name (0-9-1).
        routing_key = method.routing_key if method.queue or method.routing_key else queue
        await self._vhost.bind_queue(
            queue,
            strip_cr_lf(method.exchange),
            routing_key,
            method.arguments or {},
            owner=self._link.owner,
        )
        self._reply(state, method, commands.Queue.BindOk())

    async def _queue_unbind(self, state: ChannelState, method: Any) -> None:
        queue = self._queue_name(state, strip_cr_lf(method.queue))
        await self._vhost.unbind_queue(
            queue,
            strip_cr_lf(method.exchange),
            method.routing_key,
            method.arguments or {},
            owner=self._link.owner,
        )
        self._protocol.send_method(state.number, commands.Queue.UnbindOk())

    async def _queue_purge(self, state: ChannelState, method: Any) -> None:
        queue = self._queue_name(state, method.queue)
        count = await self._vhost.purge_queue(queue, owner=self._link.owner)
        self._reply(state, method, commands.Queue.PurgeOk(message_count=count))

    async def _queue_delete(self, state: ChannelState, method: Any) -> None:
        queue = self._queue_name(state, strip_cr_lf(method.queue))
        count = await self._vhost.delete_queue(
            queue, if_unused=method.if_unused, if_empty=method.if_empty, owner=self._link.owner
        )
        self._reply(state, method, commands.Queue.DeleteOk(message_count=count))

    # ------------------------------------------------------------------ publishing

    async def _publish(self, event: ev.PublishReceived) -> None:
        state = self._channels.get(event.channel)
        if state is None:
            return
        message = Message(event.exchange, event.routing_key, event.header, event.body)
        counts = self._counts
        size = len(event.body)
        counts.received += 1
        counts.received_bytes += size
        COUNTERS.message_sizes.observe(size)
        if not state.publisher:
            state.publisher = True
            counts.publishers += 1
        try:
            check_user_id(event.header, self._link.owner.user)
            outcome = await self._publish_or_block(message, event.mandatory)
        except AMQPError as error:
            raise error.with_method(*_BASIC_PUBLISH) from None
        if outcome.routed:
            counts.routed += 1
            counts.routed_bytes += size
        elif event.mandatory:
            counts.unroutable_returned += 1
            counts.returned_bytes += size
        else:
            counts.unroutable_dropped += 1
        if not outcome.routed and event.mandatory:
            # RabbitMQ sends the Return before the confirm of the same message.
            self._protocol.send_return(
                event.channel,
                ReplyCode.NO_ROUTE,
                "NO_ROUTE",
                event.exchange,
                event.routing_key,
                event.header,
                event.body,
            )
        if state.confirms is not None:
            counts.received_confirm += 1
            state.confirms.add(outcome.stored)

    async def _publish_or_block(self, message: Message, mandatory: bool) -> PublishOutcome:
        """Publish; while the backend holds the publish back, the reader waits here, so the
        client's socket is not read (the back-pressure itself), and clients that advertise
        ``connection.blocked`` are told why (stall_watch.py)."""
        self._stalls.publish_started(self._link.nursery)
        try:
            return await self._vhost.publish(message, mandatory=mandatory)
        finally:
            await self._stalls.publish_finished()

    async def _confirm_select(self, state: ChannelState, method: Any) -> None:
        if state.confirms is None:
            channel = state.number
            counts = self._counts
            confirmed_upto = 0

            async def send_confirm(tag: int, multiple: bool, ok: bool) -> None:
                # Tags are sequential on a confirm channel: this frame settles every message
                # after the previous confirm up to ``tag``.
                nonlocal confirmed_upto
                settled, confirmed_upto = tag - confirmed_upto, tag
                if ok:
                    counts.confirmed += settled
                else:
                    counts.nacked_publishes += settled
                if ok:
                    self._protocol.send_ack(channel, tag, multiple)
                else:
                    self._protocol.send_nack(channel, tag, multiple)
                await self._link.flush()

            state.confirms = ConfirmQueue(send_confirm, COUNTERS.publish_confirm_seconds)
            state.confirm_scope = trio.CancelScope()
            self._link.nursery.start_soon(
                self._run_in_scope, state.confirm_scope, state.confirms.run
            )
        self._reply(state, method, commands.Confirm.SelectOk())

    @staticmethod
    async def _run_in_scope(scope: trio.CancelScope, run: Callable[[], Awaitable[None]]) -> None:
        with scope:
            await run()

    # ------------------------------------------------------------------ consuming

    async def _basic_qos(self, state: ChannelState, method: Any) -> None:
        if method.prefetch_size:
            raise amqp_error(
                ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({method.prefetch_size})"
            )
        if method.global_:
            state.channel_prefetch = method.prefetch_count
        else:
            state.consumer_prefetch = method.prefetch_count
        state.signal_credit()
        self._protocol.send_method(state.number, commands.Basic.QosOk())

    async def _basic_consume(self, state: ChannelState, method: Any) -> None:
        queue = self._queue_name(state, method.queue)
        tag = method.consumer_tag or f"amq.ctag-{secrets.token_urlsafe(16)}"
        if tag in state.consumers:
            # RabbitMQ treats a reused tag as a connection error.
            raise amqp_error(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        subscription = await self._vhost.consume(
            queue,
            exclusive=method.exclusive,
            owner=self._link.owner,
            prefetch=0 if method.no_ack else state.prefetch_window(),
            arguments=method.arguments,
        )
        consumer = Consumer(tag, queue, method.no_ack, state.consumer_prefetch, subscription)
        state.consumers[tag] = consumer
        self._counts.consumers += 1
        if not method.nowait:
            self._protocol.send_method(state.number, commands.Basic.ConsumeOk(consumer_tag=tag))
        # Consume-Ok must reach the client before the first Deliver of this consumer.
        await self._link.flush()
        self._link.nursery.start_soon(self._deliver_loop, state, consumer)

    async def _deliver_loop(self, state: ChannelState, consumer: Consumer) -> None:
        counts = self._counts
        with consumer.scope:
            try:
                while True:
                    # Deliveries are flushed only when the loop is about to wait (for credit or
                    # for a message), so a burst goes out in one write.
                    if not state.has_credit(consumer):
                        await self._link.flush()
                        await state.wait_for_credit(consumer)
                    delivery = await consumer.subscription.receive(self._link.flush)
                    # Consumers of one channel wait for messages together, and a delivery
                    # elsewhere may have used the credit meanwhile: hold this message until
                    # there is credit again (RabbitMQ's limiter never overshoots).
                    await self._hold_until_credit(state, consumer, delivery)
                    if consumer.scope.cancel_called:
                        # Cancelled (Basic.Cancel, channel close) while the message was on
                        # its way; Cancel-Ok may be out already, and nothing follows it.
                        with trio.CancelScope(shield=True):
                            await delivery.reject(requeue=True)
                        return
                    tag = state.take_tag()
                    if not consumer.no_ack:
                        state.unacked[tag] = Unacked(delivery, consumer)
                        consumer.unacked += 1
                    message = delivery.message
                    size = len(message.body)
                    counts.delivered_bytes += size
                    if consumer.no_ack:
                        counts.delivered_consume_auto_ack += 1
                        counts.acknowledged_bytes += size
                    else:
                        counts.delivered_consume_manual_ack += 1
                    if delivery.redelivered:
                        counts.redelivered += 1
                    self._protocol.send_deliver(
                        state.number,
                        consumer.tag,
                        tag,
                        delivery.redelivered,
                        message.exchange,
                        message.routing_key,
                        message.header,
                        message.body,
                    )
                    if consumer.no_ack:
                        await delivery.ack()

            except SubscriptionEnded:
                await self._consumer_ended(state, consumer)
            except AMQPError as error:
                await self._link.fail(state.number, error)

    async def _hold_until_credit(
        self, state: ChannelState, consumer: Consumer, delivery: Delivery
    ) -> None:
        if state.has_credit(consumer):
            return
        try:
            await self._link.flush()
            await state.wait_for_credit(consumer)
        except BaseException:
            with trio.CancelScope(shield=True):
                await delivery.reject(requeue=True)  # never delivered: back to the queue
            raise

    async def _consumer_ended(self, state: ChannelState, consumer: Consumer) -> None:
        """The queue went away: tell the client (Basic.Cancel), as RabbitMQ does."""
        if state.consumers.pop(consumer.tag, None) is None:
            return
        self._counts.consumers -= 1
        await self._forget_consumer(state, consumer)
        self._protocol.send_consumer_cancel(state.number, consumer.tag)
        await self._link.flush()

    async def _basic_cancel(self, state: ChannelState, method: Any) -> None:
        consumer = state.consumers.pop(method.consumer_tag, None)
        if consumer is not None:
            self._counts.consumers -= 1
            consumer.scope.cancel()
            await self._forget_consumer(state, consumer)
        # Cancelling an unknown tag is not an error in RabbitMQ.
        self._reply(state, method, commands.Basic.CancelOk(consumer_tag=method.consumer_tag))

    async def _forget_consumer(self, state: ChannelState, consumer: Consumer) -> None:
        """Close the consumer's subscription; its unacknowledged messages go back to the queue.

        The reference design closes the Pulsar consumers behind an AMQP consumer on cancel,
        which redelivers what they held; later acks of those tags are accepted and ignored.
        They are requeued explicitly first, so that they come back marked redelivered.
        """
        returned = []
        for tag, entry in list(state.unacked.items()):
            if entry.consumer is consumer:
                del state.unacked[tag]
                state.forgotten.add(tag)
                returned.append(entry.delivery)
        consumer.unacked = 0
        with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
            scope.shield = True
            for delivery in returned:
                await delivery.reject(True)
            await consumer.subscription.close()
        state.signal_credit()

    async def _basic_get(self, state: ChannelState, method: Any) -> None:
        queue = self._queue_name(state, method.queue)
        got = await self._vhost.get(queue, owner=self._link.owner)
        counts = self._counts
        if got is None:
            counts.get_empty += 1
            self._protocol.send_method(state.number, commands.Basic.GetEmpty())
            return
        delivery, remaining = got
        tag = state.take_tag()
        message = delivery.message
        size = len(message.body)
        counts.delivered_bytes += size
        if delivery.redelivered:
            counts.redelivered += 1
        if method.no_ack:
            counts.delivered_get_auto_ack += 1
            counts.acknowledged_bytes += size
        else:
            counts.delivered_get_manual_ack += 1
            state.unacked[tag] = Unacked(delivery, None)
        self._protocol.send_get_ok(
            state.number,
            tag,
            delivery.redelivered,
            message.exchange,
            message.routing_key,
            remaining,
            message.header,
            message.body,
        )
        if method.no_ack:
            await delivery.ack()

    async def _basic_recover(self, state: ChannelState, method: Any) -> None:
        if not method.requeue:
            # RabbitMQ does not implement redelivery to the same consumer either.
            raise amqp_error(ReplyCode.NOT_IMPLEMENTED, "requeue=false")
        await self._settle_all(state, requeue=True)
        if isinstance(method, commands.Basic.Recover):
            self._protocol.send_method(state.number, commands.Basic.RecoverOk())

    # ------------------------------------------------------------------ acknowledgements

    async def _settle(self, channel: int, tag: int, multiple: bool, requeue: bool | None) -> None:
        """Ack (``requeue is None``), or nack/reject with or without requeue."""
        state = self._channels.get(channel)
        if state is None:
            return
        if multiple and tag == 0:
            entries = list(state.unacked.values())
            state.unacked.clear()
        elif multiple:
            if tag not in state.unacked and tag not in state.forgotten:
                raise amqp_error(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {tag}")
            state.forgotten = {t for t in state.forgotten if t > tag}
            entries = [state.unacked.pop(t) for t in [t for t in state.unacked if t <= tag]]
        else:
            entry = state.unacked.pop(tag, None)
            if entry is None:
                if tag in state.forgotten:
                    state.forgotten.discard(tag)
                    return
                raise amqp_error(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {tag}")
            entries = [entry]
        counts = self._counts
        for entry in entries:
            if entry.consumer is not None:
                entry.consumer.unacked -= 1
            if requeue is None:
                counts.acknowledged += 1
                counts.acknowledged_bytes += len(entry.delivery.message.body)
                await entry.delivery.ack()
            else:
                await entry.delivery.reject(requeue)
        if entries:
            state.signal_credit()

    async def _settle_all(self, state: ChannelState, *, requeue: bool) -> None:
        entries = list(state.unacked.values())
        state.unacked.clear()
        for consumer in state.consumers.values():
            consumer.unacked = 0
        for entry in entries:
            await entry.delivery.reject(requeue)
        state.signal_credit()

    # ------------------------------------------------------------------ teardown

    async def _release_channel(self, state: ChannelState) -> None:
        if state.confirm_scope is not None:
            state.confirm_scope.cancel()
        with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
            scope.shield = True
            for consumer in state.consumers.values():
                consumer.scope.cancel()
            # Messages fetched with Basic.Get have no subscription to give them back.
            for entry in state.unacked.values():
                await entry.delivery.reject(True)
            state.unacked.clear()
            for consumer in state.consumers.values():
                await consumer.subscription.close()
            state.consumers.clear()


_BASIC_PUBLISH = (commands.Basic.Publish.index >> 16, commands.Basic.Publish.index & 0xFFFF)
