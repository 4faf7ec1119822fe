"""Basic.Publish and Confirm.Select for one connection's session.

A publish is counted and checked (``user-id``), rewritten when it answers a direct reply-to
request, held when its channel is in tx mode, and otherwise handed to the backend:
synchronously where the backend can (``VirtualHost.publish_now``, the common case), else
awaited at once. An unroutable mandatory message is Basic.Returned (before its confirm, as
RabbitMQ). What becomes of the write is watched per channel: by the publisher confirms
(``confirms.py``) in confirm mode, else by ``write_watch.py``, which closes the channel when a
write fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from gateway.amqp import commands as cmd
from gateway.amqp import events as ev
from gateway.amqp.errors import AMQPError, ReplyCode, amqp_error
from gateway.backend.interface import Message, PublishOutcome, Stored
from gateway.backend.replies import REPLY_PREFIX, REPLY_TO_BYTES
from gateway.model.publishing import check_user_id
from gateway.observability.counters import COUNTERS
from gateway.server.channel_state import SessionChannel
from gateway.server.confirms import ConfirmQueue
from gateway.server.session_part import SessionPart, SessionShared
from gateway.server.stall_watch import StallWatch
from gateway.server.write_watch import WriteWatch

# A publish that waits this long for the backend (Pulsar's in-flight limit reached) tells the
# client, if it listens, with Connection.Blocked; Unblocked follows when the publish goes on.
BLOCKED_AFTER = 1.0


class Publishing(SessionPart):
    def __init__(self, shared: SessionShared) -> None:
        super().__init__(shared)
        self._stalls = StallWatch(BLOCKED_AFTER, self._protocol, self._link.flush)

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

    async def _publish_rest(
        self, state: SessionChannel, event: ev.PublishReceived, message: Message
    ) -> None:
        outcome = await self.route(event.channel, message, event.mandatory)
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
            # The backend's writes fail with the AMQP error for the client; anything else is
            # the gateway's own failure.
            amqp = (
                error
                if isinstance(error, AMQPError)
                else amqp_error(
                    ReplyCode.INTERNAL_ERROR, f"publishing: {type(error).__name__}: {error}"
                )
            )
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

    async def route(self, channel: int, message: Message, mandatory: bool) -> PublishOutcome:
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

    def confirm_select(self, state: SessionChannel, command: cmd.ConfirmSelect) -> None:
        if state.tx is not None:
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, "cannot switch from tx to confirm mode")
        if state.confirms is None:
            channel = state.number
            counts = self._counts
            confirmed_upto = 0

            def send_confirm(tag: int, multiple: bool, ok: bool) -> None:
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

            state.confirms = ConfirmQueue(
                send_confirm, self._link, COUNTERS.publish_confirm_seconds
            )
            self._link.nursery.start_soon(state.confirms.run)
        self._protocol.send_reply(state.number, command, cmd.ConfirmSelectOk())
