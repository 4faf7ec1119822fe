"""Settling deliveries for one connection's session: Basic.Ack, Nack, Reject and Recover.

A settlement finds its deliveries by tag among the channel's unacknowledged ones
(``amqp/deliveries.py`` judges the tags), settles them with the backend, and gives the
consumers their prefetch credit back. On a channel in tx mode it is held for Tx.Commit
(``transaction.py``). Acks are the hot path: plain calls, no coroutine per message.
"""

from __future__ import annotations

from gateway.amqp import commands as cmd
from gateway.amqp import events as ev
from gateway.amqp.errors import ReplyCode, amqp_error
from gateway.observability.counters import VhostCounters
from gateway.server.channel_state import SessionChannel, SessionLink, Unacked


class Acknowledgements:
    def __init__(
        self, link: SessionLink, counts: VhostCounters, channels: dict[int, SessionChannel]
    ) -> None:
        """``channels``: the session's open channels (the same dict, shared)."""
        self._counts = counts
        self._channels = channels
        self._protocol = link.protocol

    async def settle(self, channel: int, tag: int, multiple: bool, requeue: bool | None) -> None:
        """Ack (``requeue is None``), or nack/reject with or without requeue."""
        state = self._channels.get(channel)
        if state is None:
            return
        if state.tx is not None:
            # Applied at Tx.Commit; the prefetch credit too (RabbitMQ's limiter hears of
            # the acks at commit).
            state.tx.hold_settlement(state.tags.take(tag, multiple), requeue)
            return
        await self.apply(state, state.tags.settle(tag, multiple), requeue)

    def ack_now(self, event: ev.AckReceived) -> None:
        """Basic.Ack, as a plain call: the connection settles the acks of one read in one
        pass, without a coroutine per ack (``settle`` with ``requeue=None`` does the same)."""
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

    async def apply(
        self, state: SessionChannel, entries: list[Unacked], requeue: bool | None
    ) -> None:
        """Settle ``entries``, taken from the channel's unacknowledged deliveries: ack them
        (``requeue is None``), or reject them with or without requeue."""
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

    async def basic_recover(
        self, state: SessionChannel, command: cmd.BasicRecover | cmd.BasicRecoverAsync
    ) -> None:
        if not command.requeue:
            # RabbitMQ does not implement redelivery to the same consumer either.
            raise amqp_error(ReplyCode.NOT_IMPLEMENTED, "requeue=false")
        await self._settle_all(state, requeue=True)
        # Recover-Async is the one without a reply: its ``nowait`` is always set.
        self._protocol.send_reply(state.number, command, cmd.BasicRecoverOk())

    async def _settle_all(self, state: SessionChannel, *, requeue: bool) -> None:
        entries = state.tags.take_all()
        for consumer in [*state.consumers.values(), *state.retired]:
            consumer.unacked = 0
        for entry in entries:
            await entry.delivery.reject(requeue)
        state.signal_credit()
