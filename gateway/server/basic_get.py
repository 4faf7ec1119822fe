"""Basic.Get for one connection's session: one message from a queue, Get-Ok or Get-Empty.

A message fetched in ack mode joins the channel's unacknowledged deliveries with no consumer
(``Unacked(delivery, None)``): it takes no prefetch credit, and with no subscription to give
it back, the channel's close requeues it itself (``session.py``'s ``_release_channel``).
"""

from __future__ import annotations

from gateway.amqp import commands as cmd
from gateway.backend.interface import VirtualHost
from gateway.observability.counters import VhostCounters
from gateway.server.channel_state import SessionChannel, SessionLink, Unacked
from gateway.server.last_queue import named


class BasicGetter:
    def __init__(self, vhost: VirtualHost, link: SessionLink, counts: VhostCounters) -> None:
        self._vhost = vhost
        self._link = link
        self._counts = counts
        self._protocol = link.protocol

    async def basic_get(self, state: SessionChannel, command: cmd.BasicGet) -> None:
        got = await self._vhost.get(named(state, command), self._link.owner)
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
