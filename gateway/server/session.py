"""The channel logic of one connection: what exchange, queue, basic, confirm and tx methods do.

The sans-IO core has already checked framing and channel states and hands over typed commands
(``amqp/commands.py``); the session gives them their meaning on top of a ``VirtualHost``
backend. It keeps the connection's channels (``channel_state.py``) and the dispatch; each job
is a collaborator sharing them: ``publishing.py`` (Basic.Publish, confirms), ``consuming.py``
(Basic.Qos/Consume/Cancel, the deliver loops), ``acknowledgements.py`` (Ack, Nack, Reject,
Recover), ``basic_get.py``, ``tx_commands.py``, ``declarations.py`` (exchanges and queues),
``direct_replies.py``. This module gives a channel's messages back when the channel or the
connection goes away. Replies go out through ``send_reply``. Refusals are ``AMQPError``s with
RabbitMQ's codes and texts; the connection passes them to the core's ``refuse``, which names
the command in the Channel.Close or Connection.Close.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import assert_never

import trio

from gateway.amqp import commands as cmd
from gateway.amqp import events as ev
from gateway.backend.interface import VirtualHost
from gateway.observability.counters import COUNTERS, VhostCounters
from gateway.server.acknowledgements import Acknowledgements
from gateway.server.basic_get import BasicGetter
from gateway.server.channel_state import Consumer, SessionChannel, SessionLink
from gateway.server.consuming import CLEANUP_TIMEOUT, Consuming, stop_delivering
from gateway.server.declarations import Declarations
from gateway.server.direct_replies import DirectReplies
from gateway.server.publishing import Publishing
from gateway.server.session_part import SessionShared
from gateway.server.tx_commands import TxCommands


class AMQPSession:
    # The per-message entry points, the collaborators' own bound methods (set in __init__):
    # the connection calls them once a message, so no call of the session's in between.
    publish_now: Callable[[ev.PublishReceived], Awaitable[None] | None]
    ack_now: Callable[[ev.AckReceived], None]

    def __init__(
        self, vhost: VirtualHost, link: SessionLink, counts: VhostCounters | None = None
    ) -> None:
        """``counts``: the vhost's counters (docs/observability.md); the publish, deliver and
        ack paths add to its plain int attributes, which costs a few increments a message."""
        self._vhost = vhost
        self._link = link
        self._counts = counts if counts is not None else VhostCounters("")
        self._protocol = link.protocol
        self._channels: dict[int, SessionChannel] = {}
        self._replies = DirectReplies(vhost, link, self._counts)
        shared = SessionShared(vhost, link, self._counts, self._channels, self._replies)
        self._publishing = Publishing(shared)
        self._consuming = Consuming(shared)
        self._acknowledgements = Acknowledgements(link, self._counts, self._channels)
        self._getter = BasicGetter(vhost, link, self._counts)
        self._tx = TxCommands(link, self._publishing, self._acknowledgements)
        self._declarations = Declarations(vhost, link, self._replies, self._consuming)
        self.publish_now = self._publishing.publish_now
        self.ack_now = self._acknowledgements.ack_now

    # ------------------------------------------------------------------ event entry points

    async def handle(self, event: ev.Event) -> None:
        if isinstance(event, ev.PublishReceived):
            rest = self.publish_now(event)
            if rest is not None:
                await rest
        elif isinstance(event, ev.AckReceived):
            self.ack_now(event)
        elif isinstance(event, ev.NackReceived):
            await self._acknowledgements.settle(
                event.channel, event.delivery_tag, event.multiple, event.requeue
            )
        elif isinstance(event, ev.RejectReceived):
            await self._acknowledgements.settle(
                event.channel, event.delivery_tag, False, event.requeue
            )
        elif isinstance(event, ev.CommandReceived):
            await self._command(event.channel, event.command)
        elif isinstance(event, ev.ChannelOpened):
            self._channels[event.channel] = SessionChannel(event.channel)
            self._counts.channels += 1
            COUNTERS.channels_opened += 1
        elif isinstance(event, ev.ChannelClosed) and event.by_client:
            try:
                await self.channel_closed(event.channel)
            finally:
                # Close-Ok only now, with the channel's unacknowledged messages back in their
                # queues, as RabbitMQ: a client may consume or count them as soon as it has it.
                self._protocol.accept_channel_close(event.channel)
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
                await self._getter.basic_get(state, command)
            case cmd.ExchangeDeclare():
                await self._declarations.exchange_declare(state, command)
            case cmd.ExchangeDelete():
                await self._declarations.exchange_delete(state, command)
            case cmd.ExchangeBind():
                await self._declarations.exchange_bind(state, command)
            case cmd.ExchangeUnbind():
                await self._declarations.exchange_unbind(state, command)
            case cmd.QueueDeclare():
                await self._declarations.queue_declare(state, command)
            case cmd.QueueBind():
                await self._declarations.queue_bind(state, command)
            case cmd.QueueUnbind():
                await self._declarations.queue_unbind(state, command)
            case cmd.QueuePurge():
                await self._declarations.queue_purge(state, command)
            case cmd.QueueDelete():
                await self._declarations.queue_delete(state, command)
            case cmd.BasicQos():
                self._consuming.basic_qos(state, command)
            case cmd.BasicConsume():
                await self._consuming.basic_consume(state, command)
            case cmd.BasicCancel():
                await self._consuming.basic_cancel(state, command)
            case cmd.BasicRecover() | cmd.BasicRecoverAsync():
                await self._acknowledgements.basic_recover(state, command)
            case cmd.ConfirmSelect():
                self._publishing.confirm_select(state, command)
            case cmd.TxSelect():
                self._tx.tx_select(state, command)
            case cmd.TxCommit():
                await self._tx.tx_commit(state, command)
            case cmd.TxRollback():
                self._tx.tx_rollback(state, command)
            case _:
                assert_never(command)

    # ------------------------------------------------------------------ teardown

    async def _release_channel(self, state: SessionChannel) -> None:
        if state.confirms is not None:
            state.confirms.close()
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
                await stop_delivering(consumer)
            # Messages fetched with Basic.Get have no subscription to give them back.
            for entry in state.tags.take_all():
                await entry.delivery.reject(True)
            for consumer in [*state.consumers.values(), *state.retired]:
                await consumer.subscription.close()
            state.consumers.clear()
            state.retired.clear()
