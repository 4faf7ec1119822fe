"""Exchange.* and Queue.* for one connection's session: declare, bind, unbind, purge, delete.

The core has stripped CR and LF from the names where RabbitMQ does (``amqp/commands.py``); the
backend takes the commands as they are, once the queue names are filled in here (an empty one
is the channel's last queue, a server-named queue gets its ``amq.gen-…`` name).
"""

from __future__ import annotations

from dataclasses import replace

import trio

from gateway.amqp import commands as cmd
from gateway.backend.interface import VirtualHost
from gateway.backend.replies import is_reply_name
from gateway.model.entities import check_queue_declare
from gateway.model.naming import server_named_queue
from gateway.observability.counters import COUNTERS
from gateway.server.channel_state import SessionChannel, SessionLink
from gateway.server.consuming import Consuming
from gateway.server.direct_replies import DirectReplies
from gateway.server.last_queue import named


class Declarations:
    def __init__(
        self,
        vhost: VirtualHost,
        link: SessionLink,
        replies: DirectReplies,
        consuming: Consuming,
    ) -> None:
        """``consuming``: told of this connection's Queue.Deletes, whose own consumers of the
        queue it cancels (``queue_delete``)."""
        self._vhost = vhost
        self._link = link
        self._replies = replies
        self._consuming = consuming
        self._protocol = link.protocol

    # ------------------------------------------------------------------ exchanges

    async def exchange_declare(self, state: SessionChannel, command: cmd.ExchangeDeclare) -> None:
        await self._vhost.declare_exchange(command)
        self._protocol.send_reply(state.number, command, cmd.ExchangeDeclareOk())

    async def exchange_delete(self, state: SessionChannel, command: cmd.ExchangeDelete) -> None:
        await self._vhost.delete_exchange(command)
        self._protocol.send_reply(state.number, command, cmd.ExchangeDeleteOk())

    async def exchange_bind(self, state: SessionChannel, command: cmd.ExchangeBind) -> None:
        await self._vhost.bind_exchange(command)
        self._protocol.send_reply(state.number, command, cmd.ExchangeBindOk())

    async def exchange_unbind(self, state: SessionChannel, command: cmd.ExchangeUnbind) -> None:
        await self._vhost.unbind_exchange(command)
        self._protocol.send_reply(state.number, command, cmd.ExchangeUnbindOk())

    # ------------------------------------------------------------------ queues

    async def queue_declare(self, state: SessionChannel, command: cmd.QueueDeclare) -> None:
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

    async def queue_bind(self, state: SessionChannel, command: cmd.QueueBind) -> None:
        if not command.queue and not command.routing_key:
            # With both the queue and the routing key empty, the key is the queue's name.
            command = replace(command, routing_key=named(state, command).queue)
        await self._vhost.bind_queue(named(state, command), self._link.owner)
        self._protocol.send_reply(state.number, command, cmd.QueueBindOk())

    async def queue_unbind(self, state: SessionChannel, command: cmd.QueueUnbind) -> None:
        await self._vhost.unbind_queue(named(state, command), self._link.owner)
        self._protocol.send_reply(state.number, command, cmd.QueueUnbindOk())

    async def queue_purge(self, state: SessionChannel, command: cmd.QueuePurge) -> None:
        count = await self._vhost.purge_queue(named(state, command), self._link.owner)
        self._protocol.send_reply(state.number, command, cmd.QueuePurgeOk(count))

    async def queue_delete(self, state: SessionChannel, command: cmd.QueueDelete) -> None:
        command = named(state, command)
        name = command.queue
        # This connection's consumers of the queue get their Basic.Cancel right after
        # Delete-Ok, in the same write, whenever their deliver loops notice the deletion: as
        # RabbitMQ, whose queue process answers the delete before its exit reaches the
        # consumer's channel (checked on rabbitmq-server 3.10: Delete-Ok, then Cancel). A
        # Cancel sent as soon as a loop noticed went out before the rest of the deletion's
        # Pulsar work, and a client that closes its connection on the Cancel (amqplib's
        # "cancelled consumer" test) never read the Delete-Ok it still waited for; one sent a
        # while after Delete-Ok arrives while a client (pika) closes that channel.
        consuming = self._consuming
        consuming.deleting(name)
        try:
            count = await self._vhost.delete_queue(command, self._link.owner)
        except BaseException:
            with trio.CancelScope(shield=True):
                await consuming.deletion_failed(name)
            raise
        consuming.deleted(name)
        self._protocol.send_reply(state.number, command, cmd.QueueDeleteOk(count))
        await consuming.queue_deleted(name)
