"""Direct reply-to on one connection's channels: the ``amq.rabbitmq.reply-to`` consumer, the
requests whose ``reply_to`` names it, the replies, and the pseudo-queue's declare.

RabbitMQ's direct-reply-to.md and rabbit_channel's fast reply-to clauses; the names and their
registry (fleet-wide) are ``backend/replies.py``'s. The session hands the commands here; this
module keeps no state of its own beyond each channel's ``reply`` consumer.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.amqp import commands as cmd
from gateway.amqp.errors import ReplyCode, amqp_error
from gateway.amqp.properties import encode_properties
from gateway.backend.interface import Message, PublishOutcome, VirtualHost
from gateway.backend.replies import REPLY_TO, ReplyConsumer
from gateway.model.entities import not_found
from gateway.observability.counters import VhostCounters
from gateway.server.channel_state import SessionChannel, SessionLink


class DirectReplies:
    def __init__(self, vhost: VirtualHost, link: SessionLink, counts: VhostCounters) -> None:
        self._vhost = vhost
        self._link = link
        self._protocol = link.protocol
        self._counts = counts

    async def consume(self, state: SessionChannel, command: cmd.BasicConsume, tag: str) -> None:
        if not command.no_ack:
            # No queue to give a reply back to: RabbitMQ refuses acknowledgement mode.
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, "reply consumer cannot acknowledge")
        if state.reply is not None:
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, "reply consumer already set")
        reply = await self._vhost.replies.register(tag)
        state.reply = reply
        self._counts.consumers += 1
        self._protocol.send_reply(state.number, command, cmd.BasicConsumeOk(tag))
        await self._link.flush()
        self._link.nursery.start_soon(self._deliver_loop, state, reply)

    async def _deliver_loop(self, state: SessionChannel, reply: ReplyConsumer) -> None:
        """Deliver the replies; ends when the consumer is cancelled (its inbox closed)."""
        counts = self._counts
        async with reply.outbox:
            async for message in reply.outbox:
                if state.reply is not reply:
                    return
                counts.delivered_bytes += len(message.body)
                counts.acknowledged_bytes += len(message.body)
                counts.delivered_consume_auto_ack += 1
                self._protocol.send_deliver(
                    state.number,
                    reply.tag,
                    state.tags.next(),
                    False,
                    message.exchange,
                    message.routing_key,
                    message.header,
                    message.body,
                )
                if not reply.outbox.statistics().current_buffer_used:
                    await self._link.flush()

    def cancel(self, state: SessionChannel) -> None:
        if state.reply is not None:
            self._vhost.replies.unregister(state.reply)
            state.reply = None
            self._counts.consumers -= 1

    @staticmethod
    def rewritten(state: SessionChannel, message: Message) -> Message:
        """A request's ``reply_to=amq.rabbitmq.reply-to`` becomes the channel's reply name."""
        if message.properties.reply_to != REPLY_TO:
            return message
        if state.reply is None:
            # The requester must consume on the channel it publishes the request on.
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, "fast reply consumer does not exist")
        header = encode_properties(replace(message.properties, reply_to=state.reply.name))
        return replace(message, header=header)

    async def send(self, message: Message) -> PublishOutcome:
        """A reply: to the requester's channel or dropped; either way "routed" (no
        Basic.Return even when mandatory) and confirmed at once, as RabbitMQ does."""
        await self._vhost.send_reply(message)
        return PublishOutcome(routed=True)

    def declare(self, state: SessionChannel, command: cmd.QueueDeclare) -> None:
        """The pseudo-queue cannot be created, only checked (passive or not): 0 messages and
        1 consumer while the requester is there, 404 once it is gone."""
        if command.queue != REPLY_TO and not self._vhost.replies.alive(command.queue):
            # A name of another replica too: whether its requester is still there is not
            # known here, and answering "there" could keep a server working for nobody.
            raise not_found("queue", command.queue, self._vhost.name)
        state.last_queue = command.queue
        self._protocol.send_reply(state.number, command, cmd.QueueDeclareOk(command.queue, 0, 1))
