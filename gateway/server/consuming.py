"""Consumers of one connection's session: Basic.Qos, Basic.Consume, the deliver loop, Basic.Cancel.

Each consumer has a deliver loop (a task of the connection's nursery) that takes messages from
its subscription while the consumer has prefetch credit (``amqp/deliveries.py``'s rules) and
queues a Basic.Deliver for each, flushed when the loop is about to wait. A consumer that goes
away (Basic.Cancel, its queue deleted) stops its loop first, then gives back what it had not
delivered; what it delivered and was not acknowledged stays with the channel where RabbitMQ
keeps it (``_retire_consumer``), or goes back to the queue (``forget_consumer``).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Awaitable, Callable

import trio

from gateway.amqp import commands as cmd
from gateway.amqp.errors import AMQPError, ReplyCode, amqp_error
from gateway.backend.interface import ConsumerQos, Delivery, SubscriptionEnded
from gateway.backend.replies import REPLY_TO
from gateway.server.channel_state import Consumer, SessionChannel, Unacked
from gateway.server.last_queue import named
from gateway.server.session_part import SessionPart, SessionShared

# Cleanup (requeueing, closing subscriptions) must finish even when the connection is being
# torn down, but never hang the teardown.
CLEANUP_TIMEOUT = 10.0
# At most this many buffered messages are delivered in one pass of a consumer's loop before it
# comes back to a schedule point (other consumers and connections get their turn).
BURST = 128


class Consuming(SessionPart):
    def __init__(self, shared: SessionShared) -> None:
        super().__init__(shared)
        # Queues this connection is deleting (Queue.Delete under way, how many at once): the
        # Basic.Cancel of its own consumers of them waits for Delete-Ok (``queue_deleted``).
        self._deleting: dict[str, int] = {}

    # ------------------------------------------------------------------ Basic.Qos, Consume

    def basic_qos(self, state: SessionChannel, command: cmd.BasicQos) -> None:
        state.prefetch.qos(command)
        state.signal_credit()
        self._protocol.send_reply(state.number, command, cmd.BasicQosOk())

    async def basic_consume(self, state: SessionChannel, command: cmd.BasicConsume) -> None:
        command = named(state, command)
        tag = command.consumer_tag or f"amq.ctag-{secrets.token_urlsafe(16)}"
        if tag in state.consumers or (state.reply is not None and state.reply.tag == tag):
            # RabbitMQ treats a reused tag as a connection error.
            raise amqp_error(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        if command.queue == REPLY_TO:
            await self._replies.consume(state, command, tag)
            return
        subscription = await self._vhost.consume(
            command,
            self._link.owner,
            prefetch=0 if command.no_ack else state.prefetch.window(),
            qos=ConsumerQos(state.prefetch.consumer, state.prefetch.channel),
        )
        consumer = Consumer(
            tag,
            command.queue,
            command.no_ack,
            state.prefetch.consumer,
            subscription,
            exclusive=command.exclusive,
            arguments=command.arguments,
        )
        state.consumers[tag] = consumer
        self._counts.consumers += 1
        self._protocol.send_reply(state.number, command, cmd.BasicConsumeOk(tag))
        # Consume-Ok must reach the client before the first Deliver of this consumer.
        await self._link.flush()
        consumer.loop_ended = trio.Event()
        self._link.nursery.start_soon(self._deliver_loop, state, consumer)

    # ------------------------------------------------------------------ the deliver loop

    async def _deliver_loop(self, state: SessionChannel, consumer: Consumer) -> None:
        try:
            await self._deliver_until_cancelled(state, consumer)
        finally:
            _loop_over(consumer)

    async def _deliver_until_cancelled(self, state: SessionChannel, consumer: Consumer) -> None:
        take_now = consumer.subscription.receive_nowait
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
                    if consumer.no_ack:
                        if self._deliver(state, consumer, delivery):
                            await delivery.ack()
                        else:
                            # The channel is closing: never sent, so not settled by sending
                            # (a no-ack consumer's messages are; this one goes back).
                            with trio.CancelScope(shield=True):
                                await delivery.reject(requeue=True)
                        continue
                    # Manual acks: the messages already here go out in one pass while the
                    # consumer has credit, without a coroutine or a wait per message (the
                    # credit is looked at before each, with nothing awaited in between, so
                    # consumers sharing the channel's credit cannot overshoot it).
                    self._deliver(state, consumer, delivery)
                    for _ in range(BURST):
                        if not state.has_credit(consumer):
                            break
                        more = take_now()
                        if more is None:
                            break
                        self._deliver(state, consumer, more)

            except SubscriptionEnded:
                _loop_over(consumer)
                await self._consumer_ended(state, consumer)
            except AMQPError as error:
                # Over before the channel's close, which waits for its consumers' loops.
                _loop_over(consumer)
                await self._link.fail(state.number, error)

    def _deliver(self, state: SessionChannel, consumer: Consumer, delivery: Delivery) -> bool:
        """Basic.Deliver ``delivery`` to ``consumer`` (queued, sent at the next flush); False
        when the channel is closing and nothing was sent (an ack-mode delivery then stays
        with the channel's unacknowledged ones, which its close gives back)."""
        counts = self._counts
        tag = state.tags.next()
        message = delivery.message
        size = len(message.body)
        counts.delivered_bytes += size
        if consumer.no_ack:
            counts.delivered_consume_auto_ack += 1
            counts.acknowledged_bytes += size
        else:
            state.tags.unsettled[tag] = Unacked(delivery, consumer)
            consumer.unacked += 1
            counts.delivered_consume_manual_ack += 1
        redelivered = delivery.redelivered
        if redelivered:
            counts.redelivered += 1
        return self._protocol.send_deliver(
            state.number,
            consumer.tag,
            tag,
            redelivered,
            message.exchange,
            message.routing_key,
            message.header,
            message.body,
        )

    async def _hold_until_credit(
        self, state: SessionChannel, consumer: Consumer, delivery: Delivery
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

    # ------------------------------------------------------------------ consumers ending

    async def _consumer_ended(self, state: SessionChannel, consumer: Consumer) -> None:
        """The queue went away: tell the client (Basic.Cancel), as RabbitMQ does; after
        Delete-Ok when this connection is deleting it (``queue_deleted`` does it then)."""
        if consumer.queue in self._deleting:
            consumer.ended = True
            return
        if self._consumer_cancelled(state, consumer):
            await self.forget_consumer(state, consumer)
            await self._link.flush()

    def _consumer_cancelled(self, state: SessionChannel, consumer: Consumer) -> bool:
        """Basic.Cancel queued for a consumer still registered on the channel (now removed);
        False if it was not (cancelled already)."""
        if state.consumers.pop(consumer.tag, None) is None:
            return False
        self._counts.consumers -= 1
        self._protocol.send_consumer_cancel(state.number, consumer.tag)
        return True

    def deleting(self, name: str) -> None:
        """This connection's Queue.Delete of ``name`` has begun: a consumer of it whose loop
        sees the queue end waits for its outcome (``queue_deleted``, ``deletion_failed``)."""
        self._deleting[name] = self._deleting.get(name, 0) + 1

    def _deleting_done(self, name: str) -> None:
        left = self._deleting[name] - 1
        if left:
            self._deleting[name] = left
        else:
            del self._deleting[name]

    async def deletion_failed(self, name: str) -> None:
        """Not deleted: a consumer whose loop ended meanwhile is told now, as always."""
        self._deleting_done(name)
        for channel in list(self._channels.values()):
            for consumer in list(channel.consumers.values()):
                if consumer.queue == name and consumer.ended:
                    await self._consumer_ended(channel, consumer)

    def deleted(self, name: str) -> None:
        """The Queue.Delete of ``name`` succeeded; Delete-Ok is about to be queued."""
        self._deleting_done(name)

    async def queue_deleted(self, name: str) -> None:
        """Basic.Cancel for this connection's consumers of ``name``, just deleted, queued
        right after its Delete-Ok with nothing awaited between, so both go out in one write
        (``Declarations.queue_delete`` says why)."""
        ending = [
            (channel, consumer)
            for channel in list(self._channels.values())
            for consumer in list(channel.consumers.values())
            if consumer.queue == name
        ]
        for channel, consumer in ending:
            consumer.scope.cancel()
            self._consumer_cancelled(channel, consumer)
        for channel, consumer in ending:
            await self.forget_consumer(channel, consumer)
        await self._link.flush()

    # ------------------------------------------------------------------ Basic.Cancel

    async def basic_cancel(self, state: SessionChannel, command: cmd.BasicCancel) -> None:
        if state.reply is not None and state.reply.tag == command.consumer_tag:
            self._replies.cancel(state)
        consumer = state.consumers.pop(command.consumer_tag, None)
        if consumer is not None:
            self._counts.consumers -= 1
            await stop_delivering(consumer)
            retire = getattr(consumer.subscription, "retire", None)
            if not (consumer.unacked and retire is not None) or not (
                await self._retire_consumer(state, consumer, retire)
            ):
                await self.forget_consumer(state, consumer)
        # Cancelling an unknown tag is not an error in RabbitMQ.
        self._protocol.send_reply(state.number, command, cmd.BasicCancelOk(command.consumer_tag))

    async def _retire_consumer(
        self,
        state: SessionChannel,
        consumer: Consumer,
        retire: Callable[[Callable[[Callable[[], Awaitable[None]]], None]], Awaitable[bool]],
    ) -> bool:
        """Basic.Cancel of a consumer with deliveries unacknowledged: as RabbitMQ, they stay
        with the channel (rabbit_channel keeps them in its unacked queue): acks, nacks and
        rejects of their tags settle them, and the channel closing gives them back. Giving
        them back at once would hand them to the queue's next consumer, which may be this
        channel's no-ack consumer that the client cancels next (pika's channel close cancels
        each consumer before Channel.Close, and drops what arrives meanwhile): lost. The
        consumer leaves the queue now; its subscription closes once they are settled.
        False when the subscription cannot keep them (a single-active-consumer queue hands
        them to its next consumer): the caller gives them back."""
        # (Those whose deliveries are all settled by now have closed their subscriptions.)
        state.retired = [c for c in state.retired if c.unacked]
        state.retired.append(consumer)
        with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
            scope.shield = True
            if not await retire(self._spawn_closing):
                state.retired.remove(consumer)
                return False
        return True

    def _spawn_closing(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run a retired consumer's closing in the background: not once the connection's
        tasks are ending (settling its last delivery as the channel closes), when the
        session's ``_release_channel`` closes it itself."""
        with contextlib.suppress(RuntimeError):  # the nursery is closed to new arrivals
            self._link.nursery.start_soon(work)

    async def forget_consumer(self, state: SessionChannel, consumer: Consumer) -> None:
        """Close the consumer's subscription; its unacknowledged messages go back to the queue.

        The reference design closes the Pulsar consumers behind an AMQP consumer on cancel,
        which redelivers what they held; later acks of those tags are accepted and ignored.
        They are requeued explicitly first, so that they come back marked redelivered.
        """
        returned = [e.delivery for e in state.tags.forget(lambda e: e.consumer is consumer)]
        consumer.unacked = 0
        with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
            scope.shield = True
            for delivery in returned:
                await delivery.reject(True)
            await consumer.subscription.close()
        state.signal_credit()


async def stop_delivering(consumer: Consumer) -> None:
    """Cancel the consumer's delivery loop and wait until it has ended (a message it had
    in hand goes back to the queue first: ``_deliver_until_cancelled``)."""
    consumer.scope.cancel()
    if consumer.loop_ended is not None:
        with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
            scope.shield = True
            await consumer.loop_ended.wait()


def _loop_over(consumer: Consumer) -> None:
    if consumer.loop_ended is not None:
        consumer.loop_ended.set()
