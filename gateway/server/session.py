"""The channel logic of one connection: what exchange, queue, basic and confirm methods do.

The sans-IO core has already checked framing and channel states and hands over typed commands
(``amqp/commands.py``); this module gives them their meaning on top of a ``VirtualHost``
backend: consumers and their deliveries (tags and prefetch credit by ``amqp/deliveries.py``'s
rules), acknowledgements, publisher confirms, and giving unacknowledged messages back when a
channel, consumer or connection goes away. Replies go out through ``send_reply``. Refusals are
``AMQPError``s with RabbitMQ's codes and texts; the connection passes them to the core's
``refuse``, which names the command in the Channel.Close or Connection.Close.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TypeVar, assert_never

import trio

from gateway.amqp import commands as cmd
from gateway.amqp import events as ev
from gateway.amqp.errors import AMQPError, ReplyCode, amqp_error
from gateway.backend.interface import (
    ConsumerQos,
    Delivery,
    Message,
    PublishOutcome,
    Stored,
    SubscriptionEnded,
    VirtualHost,
)
from gateway.backend.pulsar.reply_codes import to_amqp_error
from gateway.backend.replies import (
    REPLY_PREFIX,
    REPLY_TO,
    REPLY_TO_BYTES,
    is_reply_name,
)
from gateway.model.entities import check_queue_declare
from gateway.model.naming import server_named_queue
from gateway.model.publishing import check_user_id
from gateway.observability.counters import COUNTERS, VhostCounters
from gateway.server.channel_state import Consumer, SessionChannel, SessionLink, Unacked
from gateway.server.confirms import ConfirmQueue
from gateway.server.direct_replies import DirectReplies
from gateway.server.stall_watch import StallWatch
from gateway.server.transaction import Transaction
from gateway.server.write_watch import WriteWatch

log = logging.getLogger("gateway.session")

# Cleanup (requeueing, closing subscriptions) must finish even when the connection is being
# torn down, but never hang the teardown.
CLEANUP_TIMEOUT = 10.0
# A publish that waits this long for the backend (Pulsar's in-flight limit reached) tells the
# client, if it listens, with Connection.Blocked; Unblocked follows when the publish goes on.
BLOCKED_AFTER = 1.0
# At most this many buffered messages are delivered in one pass of a consumer's loop before it
# comes back to a schedule point (other consumers and connections get their turn).
BURST = 128


# The commands whose empty queue name means "the last queue declared on the channel".
NamesQueue = TypeVar(
    "NamesQueue",
    cmd.QueueBind,
    cmd.QueueUnbind,
    cmd.QueuePurge,
    cmd.QueueDelete,
    cmd.BasicConsume,
    cmd.BasicGet,
)


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
        self._channels: dict[int, SessionChannel] = {}
        self._replies = DirectReplies(vhost, link, self._counts)
        # Queues this connection is deleting (Queue.Delete under way, how many at once): the
        # Basic.Cancel of its own consumers of them waits for Delete-Ok (_queue_delete).
        self._deleting: dict[str, int] = {}

    # ------------------------------------------------------------------ event entry points

    async def handle(self, event: ev.Event) -> None:
        if isinstance(event, ev.PublishReceived):
            await self._publish(event)
        elif isinstance(event, ev.AckReceived):
            self.ack_now(event)
        elif isinstance(event, ev.NackReceived):
            await self._settle(event.channel, event.delivery_tag, event.multiple, event.requeue)
        elif isinstance(event, ev.RejectReceived):
            await self._settle(event.channel, event.delivery_tag, False, event.requeue)
        elif isinstance(event, ev.CommandReceived):
            await self._command(event.channel, event.command)
        elif isinstance(event, ev.ChannelOpened):
            self._channels[event.channel] = SessionChannel(event.channel)
            self._counts.channels += 1
            COUNTERS.channels_opened += 1
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

    def consumers(self) -> list[tuple[int, Consumer]]:
        """(channel number, consumer) of every consumer of the open channels, for the
        management API (direct reply-to's is no queue's consumer: left out, as RabbitMQ)."""
        return [
            (state.number, consumer)
            for state in self._channels.values()
            for consumer in state.consumers.values()
        ]

    async def close(self) -> None:
        for channel in list(self._channels):
            await self.channel_closed(channel)
        with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
            scope.shield = True
            await self._vhost.release(self._link.owner)

    # ------------------------------------------------------------------ dispatch

    async def _command(self, channel: int, command: cmd.Command) -> None:
        state = self._channels.get(channel)
        if state is None:
            return  # the channel closed while this command was queued behind others
        # A match on the command's type: mypy checks that every command has its case.
        # Basic.Get comes first: it is the one command a client may send per message.
        match command:
            case cmd.BasicGet():
                await self._basic_get(state, command)
            case cmd.ExchangeDeclare():
                await self._exchange_declare(state, command)
            case cmd.ExchangeDelete():
                await self._exchange_delete(state, command)
            case cmd.ExchangeBind():
                await self._exchange_bind(state, command)
            case cmd.ExchangeUnbind():
                await self._exchange_unbind(state, command)
            case cmd.QueueDeclare():
                await self._queue_declare(state, command)
            case cmd.QueueBind():
                await self._queue_bind(state, command)
            case cmd.QueueUnbind():
                await self._queue_unbind(state, command)
            case cmd.QueuePurge():
                await self._queue_purge(state, command)
            case cmd.QueueDelete():
                await self._queue_delete(state, command)
            case cmd.BasicQos():
                self._basic_qos(state, command)
            case cmd.BasicConsume():
                await self._basic_consume(state, command)
            case cmd.BasicCancel():
                await self._basic_cancel(state, command)
            case cmd.BasicRecover() | cmd.BasicRecoverAsync():
                await self._basic_recover(state, command)
            case cmd.ConfirmSelect():
                self._confirm_select(state, command)
            case cmd.TxSelect():
                self._tx_select(state, command)
            case cmd.TxCommit():
                await self._tx_commit(state, command)
            case cmd.TxRollback():
                self._tx_rollback(state, command)
            case _:
                assert_never(command)

    @staticmethod
    def _named(state: SessionChannel, command: NamesQueue) -> NamesQueue:
        """AMQP 0-9-1: an empty queue name means the last queue declared on the channel."""
        if command.queue:
            return command
        if not state.last_queue:
            raise amqp_error(ReplyCode.NOT_FOUND, "no previously declared queue")
        return replace(command, queue=state.last_queue)

    # ------------------------------------------------------------------ exchanges and queues
    # The core has stripped CR and LF from the names where RabbitMQ does (commands.py); the
    # backend takes the commands as they are, once the queue names are filled in here.

    async def _exchange_declare(self, state: SessionChannel, command: cmd.ExchangeDeclare) -> None:
        await self._vhost.declare_exchange(command)
        self._protocol.send_reply(state.number, command, cmd.ExchangeDeclareOk())

    async def _exchange_delete(self, state: SessionChannel, command: cmd.ExchangeDelete) -> None:
        await self._vhost.delete_exchange(command)
        self._protocol.send_reply(state.number, command, cmd.ExchangeDeleteOk())

    async def _exchange_bind(self, state: SessionChannel, command: cmd.ExchangeBind) -> None:
        await self._vhost.bind_exchange(command)
        self._protocol.send_reply(state.number, command, cmd.ExchangeBindOk())

    async def _exchange_unbind(self, state: SessionChannel, command: cmd.ExchangeUnbind) -> None:
        await self._vhost.unbind_exchange(command)
        self._protocol.send_reply(state.number, command, cmd.ExchangeUnbindOk())

    async def _queue_declare(self, state: SessionChannel, command: cmd.QueueDeclare) -> None:
        if is_reply_name(command.queue):
            self._replies.declare(state, command)
            return
        if command.queue:
            # The name rules need no lookup; server-named queues are exempt from them.
            check_queue_declare(command.queue, passive=command.passive)
        else:
            command = replace(command, queue=server_named_queue(), server_named=True)
        status = await self._vhost.declare_queue(command, self._link.owner)
        state.last_queue = status.name
        COUNTERS.queues_declared += 1
        if status.created:
            COUNTERS.queues_created += 1
        self._protocol.send_reply(
            state.number,
            command,
            cmd.QueueDeclareOk(status.name, status.message_count, status.consumer_count),
        )

    async def _queue_bind(self, state: SessionChannel, command: cmd.QueueBind) -> None:
        if not command.queue and not command.routing_key:
            # With both the queue and the routing key empty, the key is the queue's name.
            command = replace(command, routing_key=self._named(state, command).queue)
        await self._vhost.bind_queue(self._named(state, command), self._link.owner)
        self._protocol.send_reply(state.number, command, cmd.QueueBindOk())

    async def _queue_unbind(self, state: SessionChannel, command: cmd.QueueUnbind) -> None:
        await self._vhost.unbind_queue(self._named(state, command), self._link.owner)
        self._protocol.send_reply(state.number, command, cmd.QueueUnbindOk())

    async def _queue_purge(self, state: SessionChannel, command: cmd.QueuePurge) -> None:
        count = await self._vhost.purge_queue(self._named(state, command), self._link.owner)
        self._protocol.send_reply(state.number, command, cmd.QueuePurgeOk(count))

    async def _queue_delete(self, state: SessionChannel, command: cmd.QueueDelete) -> None:
        command = self._named(state, command)
        name = command.queue
        # This connection's consumers of the queue get their Basic.Cancel right after
        # Delete-Ok, in the same write, whenever their deliver loops notice the deletion: as
        # RabbitMQ, whose queue process answers the delete before its exit reaches the
        # consumer's channel (checked on rabbitmq-server 3.10: Delete-Ok, then Cancel). A
        # Cancel sent as soon as a loop noticed went out before the rest of the deletion's
        # Pulsar work, and a client that closes its connection on the Cancel (amqplib's
        # "cancelled consumer" test) never read the Delete-Ok it still waited for; one sent a
        # while after Delete-Ok arrives while a client (pika) closes that channel.
        self._deleting[name] = self._deleting.get(name, 0) + 1
        try:
            count = await self._vhost.delete_queue(command, self._link.owner)
        except BaseException:
            self._deleting_done(name)
            # Not deleted: a consumer whose loop ended meanwhile is told now, as always.
            with trio.CancelScope(shield=True):
                await self._cancel_ended(name)
            raise
        self._deleting_done(name)
        self._protocol.send_reply(state.number, command, cmd.QueueDeleteOk(count))
        ending = [
            (channel, consumer)
            for channel in list(self._channels.values())
            for consumer in list(channel.consumers.values())
            if consumer.queue == name
        ]
        # Queued with nothing awaited since Delete-Ok, so both go out in one write.
        for channel, consumer in ending:
            consumer.scope.cancel()
            self._consumer_cancelled(channel, consumer)
        for channel, consumer in ending:
            await self._forget_consumer(channel, consumer)
        await self._link.flush()

    def _deleting_done(self, name: str) -> None:
        left = self._deleting[name] - 1
        if left:
            self._deleting[name] = left
        else:
            del self._deleting[name]

    async def _cancel_ended(self, name: str) -> None:
        """Basic.Cancel for this connection's consumers of ``name`` whose deliver loops saw
        the queue end while a Queue.Delete of it was under way, and that failed."""
        for channel in list(self._channels.values()):
            for consumer in list(channel.consumers.values()):
                if consumer.queue == name and consumer.ended:
                    await self._consumer_ended(channel, consumer)

    # ------------------------------------------------------------------ publishing

    def publish_now(self, event: ev.PublishReceived) -> Awaitable[None] | None:
        """Publish, synchronously where the backend can (``VirtualHost.publish_now``: the
        common case); otherwise returns what is left to do, for the caller to await at once.
        The connection calls this for each Basic.Publish of a read, so that a read's
        publishes are one pass with no coroutine, checkpoint or wait per message."""
        state = self._channels.get(event.channel)
        if state is None:
            return None
        message = self._received(state, event)
        if message is None:
            return None
        if message.exchange or not message.routing_key.startswith(REPLY_PREFIX):
            outcome = self._vhost.publish_now(message, mandatory=event.mandatory)
            if outcome is not None:
                self._routed(event.channel, message, event.mandatory, outcome)
                if state.confirms is not None:
                    self._counts.received_confirm += 1
                    state.confirms.add(outcome.stored)
                else:
                    writes = state.writes or self._watch_writes(state)
                    if outcome.stored is not writes.last:  # a group's next message: seen
                        writes.add(outcome.stored)
                return None
        return self._publish_rest(state, event, message)

    async def _publish(self, event: ev.PublishReceived) -> None:
        rest = self.publish_now(event)
        if rest is not None:
            await rest

    async def _publish_rest(
        self, state: SessionChannel, event: ev.PublishReceived, message: Message
    ) -> None:
        outcome = await self._route(event.channel, message, event.mandatory)
        if state.confirms is not None:
            self._counts.received_confirm += 1
            state.confirms.add(outcome.stored)
        else:
            (state.writes or self._watch_writes(state)).add(outcome.stored)

    def _watch_writes(self, state: SessionChannel) -> WriteWatch:
        """The channel's watch of its writes without confirms (write_watch.py): a failed one
        closes the channel (or the connection, for a hard error), unless it closed already."""
        link = self._link

        def fail(error: BaseException) -> None:
            if self._channels.get(state.number) is not state:
                return  # closed meanwhile (its number may be a new channel's by now)
            amqp = error if isinstance(error, AMQPError) else to_amqp_error(error, "publishing")
            with contextlib.suppress(RuntimeError):  # the connection is ending anyway
                link.nursery.start_soon(link.fail, state.number, amqp)

        def spawn(wait: Callable[[Stored], Awaitable[None]], stored: Stored) -> None:
            with contextlib.suppress(RuntimeError):
                link.nursery.start_soon(wait, stored)

        state.writes = WriteWatch(fail, spawn)
        return state.writes

    def _received(self, state: SessionChannel, event: ev.PublishReceived) -> Message | None:
        """Count and check a publish; its message, or None when a transaction holds it."""
        message = Message(event.exchange, event.routing_key, event.header, event.body)
        counts = self._counts
        size = len(event.body)
        counts.received += 1
        counts.received_bytes += size
        COUNTERS.message_sizes.observe(size)
        if not state.publisher:
            state.publisher = True
            counts.publishers += 1
        # A refusal names Basic.Publish: the connection passes the event to ``refuse``.
        check_user_id(event.header, self._link.owner.user)
        if REPLY_TO_BYTES in event.header:  # a byte search: no decode for other messages
            message = self._replies.rewritten(state, message)
        if state.tx is not None:
            state.tx.hold_publish(message, event.mandatory)  # published at Tx.Commit
            return None
        return message

    async def _route(self, channel: int, message: Message, mandatory: bool) -> PublishOutcome:
        """Publish ``message`` to the backend (a direct reply to its requester); Basic.Return
        it if it is mandatory and unroutable."""
        if not message.exchange and message.routing_key.startswith(REPLY_PREFIX):
            outcome = await self._replies.send(message)
        else:
            outcome = await self._publish_or_block(message, mandatory)
        self._routed(channel, message, mandatory, outcome)
        return outcome

    def _routed(
        self, channel: int, message: Message, mandatory: bool, outcome: PublishOutcome
    ) -> None:
        """Count where ``message`` went; Basic.Return it if mandatory and unroutable."""
        counts = self._counts
        size = len(message.body)
        if outcome.routed:
            counts.routed += 1
            counts.routed_bytes += size
        elif mandatory:
            counts.unroutable_returned += 1
            counts.returned_bytes += size
        else:
            counts.unroutable_dropped += 1
        if not outcome.routed and mandatory:
            # RabbitMQ sends the Return before the confirm of the same message.
            self._protocol.send_return(
                channel,
                ReplyCode.NO_ROUTE,
                "NO_ROUTE",
                message.exchange,
                message.routing_key,
                message.header,
                message.body,
            )

    async def _publish_or_block(self, message: Message, mandatory: bool) -> PublishOutcome:
        """Publish; while the backend holds the publish back, the reader waits here, so the
        client's socket is not read (the back-pressure itself), and clients that advertise
        ``connection.blocked`` are told why (stall_watch.py)."""
        self._stalls.publish_started(self._link.nursery)
        try:
            return await self._vhost.publish(message, mandatory=mandatory)
        finally:
            await self._stalls.publish_finished()

    def _confirm_select(self, state: SessionChannel, command: cmd.ConfirmSelect) -> None:
        if state.tx is not None:
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, "cannot switch from tx to confirm mode")
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
        self._protocol.send_reply(state.number, command, cmd.ConfirmSelectOk())

    # ------------------------------------------------------------------ transactions
    # RabbitMQ's rabbit_channel: publishes and settlements of a tx channel wait for Tx.Commit
    # (transaction.py); tx and confirm modes exclude each other (406, RabbitMQ's texts).

    def _tx_select(self, state: SessionChannel, command: cmd.TxSelect) -> None:
        if state.confirms is not None:
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, "cannot switch from confirm to tx mode")
        if state.tx is None:  # a second Tx.Select keeps the open transaction, as RabbitMQ does
            state.tx = Transaction()
        self._protocol.send_reply(state.number, command, cmd.TxSelectOk())

    @staticmethod
    def _transaction(state: SessionChannel) -> Transaction[Unacked]:
        if state.tx is None:
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")
        return state.tx

    async def _tx_commit(self, state: SessionChannel, command: cmd.TxCommit) -> None:
        """Publish the held messages in order, then apply the held settlements, then answer
        once every message is durable (RabbitMQ's Commit-Ok waits for the queues too). A
        refused publish (a missing exchange) closes the channel naming Tx.Commit."""
        tx = self._transaction(state)
        if state.number not in self._protocol.open_channels:
            # Refused meanwhile (a publish over the limit read in the same batch): the channel
            # is closing, and its transaction dies with it, uncommitted.
            return
        publishes, settlements = tx.take()
        try:
            stored = [
                (await self._route(state.number, held.message, held.mandatory)).stored
                for held in publishes
            ]
        except BaseException:
            # Refused before its settlements: their deliveries are still unacknowledged and
            # go back to the queue when the channel closes.
            for settlement in settlements:
                state.tags.restore(settlement.entries)
            raise
        for settlement in settlements:
            await self._apply_settlement(
                state, list(settlement.entries.values()), settlement.requeue
            )
        for one in stored:
            try:
                await one.durable()
            except Exception as error:
                # RabbitMQ's text when a queue refused a message of the commit.
                log.warning("tx.commit on channel %d: a write failed: %s", state.number, error)
                raise amqp_error(ReplyCode.PRECONDITION_FAILED, "partial tx completion") from error
        self._protocol.send_reply(state.number, command, cmd.TxCommitOk())

    def _tx_rollback(self, state: SessionChannel, command: cmd.TxRollback) -> None:
        """Drop the held messages; the held settlements' deliveries become unacknowledged
        again (RabbitMQ puts them back on the channel: not requeued, settle them again)."""
        tx = self._transaction(state)
        state.tags.restore(tx.held_entries())
        tx.take()
        self._protocol.send_reply(state.number, command, cmd.TxRollbackOk())

    @staticmethod
    async def _run_in_scope(scope: trio.CancelScope, run: Callable[[], Awaitable[None]]) -> None:
        with scope:
            await run()

    # ------------------------------------------------------------------ consuming

    def _basic_qos(self, state: SessionChannel, command: cmd.BasicQos) -> None:
        state.prefetch.qos(command)
        state.signal_credit()
        self._protocol.send_reply(state.number, command, cmd.BasicQosOk())

    async def _basic_consume(self, state: SessionChannel, command: cmd.BasicConsume) -> None:
        command = self._named(state, command)
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

    async def _deliver_loop(self, state: SessionChannel, consumer: Consumer) -> None:
        try:
            await self._deliver_until_cancelled(state, consumer)
        finally:
            self._loop_over(consumer)

    @staticmethod
    async def _stop_delivering(consumer: Consumer) -> None:
        """Cancel the consumer's delivery loop and wait until it has ended (a message it had
        in hand goes back to the queue first: ``_deliver_until_cancelled``)."""
        consumer.scope.cancel()
        if consumer.loop_ended is not None:
            with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
                scope.shield = True
                await consumer.loop_ended.wait()

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
                self._loop_over(consumer)
                await self._consumer_ended(state, consumer)
            except AMQPError as error:
                # Over before the channel's close, which waits for its consumers' loops.
                self._loop_over(consumer)
                await self._link.fail(state.number, error)

    @staticmethod
    def _loop_over(consumer: Consumer) -> None:
        if consumer.loop_ended is not None:
            consumer.loop_ended.set()

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

    async def _consumer_ended(self, state: SessionChannel, consumer: Consumer) -> None:
        """The queue went away: tell the client (Basic.Cancel), as RabbitMQ does; after
        Delete-Ok when this connection is deleting it (``_queue_delete`` does it then)."""
        if consumer.queue in self._deleting:
            consumer.ended = True
            return
        if self._consumer_cancelled(state, consumer):
            await self._forget_consumer(state, consumer)
            await self._link.flush()

    def _consumer_cancelled(self, state: SessionChannel, consumer: Consumer) -> bool:
        """Basic.Cancel queued for a consumer still registered on the channel (now removed);
        False if it was not (cancelled already)."""
        if state.consumers.pop(consumer.tag, None) is None:
            return False
        self._counts.consumers -= 1
        self._protocol.send_consumer_cancel(state.number, consumer.tag)
        return True

    async def _basic_cancel(self, state: SessionChannel, command: cmd.BasicCancel) -> None:
        if state.reply is not None and state.reply.tag == command.consumer_tag:
            self._replies.cancel(state)
        consumer = state.consumers.pop(command.consumer_tag, None)
        if consumer is not None:
            self._counts.consumers -= 1
            await self._stop_delivering(consumer)
            retire = getattr(consumer.subscription, "retire", None)
            if not (consumer.unacked and retire is not None) or not (
                await self._retire_consumer(state, consumer, retire)
            ):
                await self._forget_consumer(state, consumer)
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
        tasks are ending (settling its last delivery as the channel closes), when
        ``_release_channel`` closes it itself."""
        with contextlib.suppress(RuntimeError):  # the nursery is closed to new arrivals
            self._link.nursery.start_soon(work)

    async def _forget_consumer(self, state: SessionChannel, consumer: Consumer) -> None:
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

    async def _basic_get(self, state: SessionChannel, command: cmd.BasicGet) -> None:
        got = await self._vhost.get(self._named(state, command), self._link.owner)
        counts = self._counts
        if got is None:
            counts.get_empty += 1
            self._protocol.send_reply(state.number, command, cmd.BasicGetEmpty())
            return
        delivery, remaining = got
        tag = state.tags.next()
        message = delivery.message
        size = len(message.body)
        counts.delivered_bytes += size
        if delivery.redelivered:
            counts.redelivered += 1
        if command.no_ack:
            counts.delivered_get_auto_ack += 1
            counts.acknowledged_bytes += size
        else:
            counts.delivered_get_manual_ack += 1
            state.tags.unsettled[tag] = Unacked(delivery, None)
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
        if command.no_ack:
            await delivery.ack()

    async def _basic_recover(
        self, state: SessionChannel, command: cmd.BasicRecover | cmd.BasicRecoverAsync
    ) -> None:
        if not command.requeue:
            # RabbitMQ does not implement redelivery to the same consumer either.
            raise amqp_error(ReplyCode.NOT_IMPLEMENTED, "requeue=false")
        await self._settle_all(state, requeue=True)
        # Recover-Async is the one without a reply: its ``nowait`` is always set.
        self._protocol.send_reply(state.number, command, cmd.BasicRecoverOk())

    # ------------------------------------------------------------------ acknowledgements

    async def _settle(self, channel: int, tag: int, multiple: bool, requeue: bool | None) -> None:
        """Ack (``requeue is None``), or nack/reject with or without requeue."""
        state = self._channels.get(channel)
        if state is None:
            return
        if state.tx is not None:
            # Applied at Tx.Commit; the prefetch credit too (RabbitMQ's limiter hears of
            # the acks at commit).
            state.tx.hold_settlement(state.tags.take(tag, multiple), requeue)
            return
        await self._apply_settlement(state, state.tags.settle(tag, multiple), requeue)

    def ack_now(self, event: ev.AckReceived) -> None:
        """Basic.Ack, as a plain call: the connection settles the acks of one read in one
        pass, without a coroutine per ack (``_settle`` with ``requeue=None`` does the same)."""
        state = self._channels.get(event.channel)
        if state is None:
            return
        if state.tx is not None:
            state.tx.hold_settlement(state.tags.take(event.delivery_tag, event.multiple), None)
            return
        if not event.multiple:
            # One ack per delivery, the usual case: settled without the lists and dicts of
            # ``settle`` (an unknown or forgotten tag goes the general way, which judges it).
            entry = state.tags.unsettled.pop(event.delivery_tag, None)
            if entry is not None:
                self._ack_one(state, entry)
                return
        self._ack(state, state.tags.settle(event.delivery_tag, event.multiple))

    def _ack_one(self, state: SessionChannel, entry: Unacked) -> None:
        """``_ack`` of one entry."""
        consumer = entry.consumer
        if consumer is not None and consumer.unacked > 0:
            consumer.unacked -= 1
        delivery = entry.delivery
        delivery.ack_now()
        counts = self._counts
        counts.acknowledged += 1
        counts.acknowledged_bytes += len(delivery.message.body)
        state.signal_credit()

    async def _apply_settlement(
        self, state: SessionChannel, entries: list[Unacked], requeue: bool | None
    ) -> None:
        if requeue is None:
            self._ack(state, entries)
            return
        for entry in entries:
            if entry.consumer is not None and entry.consumer.unacked > 0:
                entry.consumer.unacked -= 1
            await entry.delivery.reject(requeue)
        if entries:
            state.signal_credit()

    def _ack(self, state: SessionChannel, entries: list[Unacked]) -> None:
        """Acks, the hot path: plain calls, no coroutine per message (Delivery.ack_now)."""
        size = 0
        for entry in entries:
            # A consumer's count may have been reset meanwhile (Basic.Recover in a tx).
            consumer = entry.consumer
            if consumer is not None and consumer.unacked > 0:
                consumer.unacked -= 1
            delivery = entry.delivery
            size += len(delivery.message.body)
            delivery.ack_now()
        counts = self._counts
        counts.acknowledged += len(entries)
        counts.acknowledged_bytes += size
        if entries:
            state.signal_credit()

    async def _settle_all(self, state: SessionChannel, *, requeue: bool) -> None:
        entries = state.tags.take_all()
        for consumer in [*state.consumers.values(), *state.retired]:
            consumer.unacked = 0
        for entry in entries:
            await entry.delivery.reject(requeue)
        state.signal_credit()

    # ------------------------------------------------------------------ teardown

    async def _release_channel(self, state: SessionChannel) -> None:
        if state.confirm_scope is not None:
            state.confirm_scope.cancel()
        if state.tx is not None:
            # An uncommitted transaction dies with its channel: its messages were never
            # published, the deliveries it settled go back to the queue with the rest.
            state.tags.restore(state.tx.held_entries())
        if state.reply is not None:
            self._replies.cancel(state)
        with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
            scope.shield = True
            for consumer in state.consumers.values():
                consumer.scope.cancel()
            for consumer in state.consumers.values():
                await self._stop_delivering(consumer)
            # Messages fetched with Basic.Get have no subscription to give them back.
            for entry in state.tags.take_all():
                await entry.delivery.reject(True)
            for consumer in [*state.consumers.values(), *state.retired]:
                await consumer.subscription.close()
            state.consumers.clear()
            state.retired.clear()
