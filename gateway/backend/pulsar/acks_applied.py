"""Read-your-writes for counts: wait until the broker has applied this replica's acks.

pulsar-client sends acknowledgements in groups (every ~100 ms) and without a receipt, so for
40-220 ms after a client's Basic.Ack, Basic.Get with auto-ack or a reject that drops, Pulsar's
backlog still counts the message: a Queue.Declare-Ok right after said 1 where RabbitMQ says
0, and Queue.Delete if-empty answered 406. Before a count, each of this replica's consumers
of the queue that acknowledged something since the last count is checked: once the broker's
cursor has the last message it acknowledged, it has every earlier one (one consumer's acks
travel in order on one connection). The check reads the topic's cursor (internal stats) until
then, for at most ``ACK_WAIT`` seconds (a consumer closed meanwhile leaves its message to be
redelivered: its ack never arrives)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import trio

from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.consumer import TrioConsumer
from gateway.pulsar.errors import AdminError
from gateway.pulsar.received import ReceivedMessage

__all__ = ["ACK_WAIT", "acks_applied"]

log = logging.getLogger("gateway.pulsar.vhost")

# The longest a count waits for the broker to apply an ack (a few of pulsar-client's
# 100 ms ack groups), and how often it looks meanwhile.
ACK_WAIT = 1.0
ACK_POLL = 0.02


async def acks_applied(admin: PulsarAdmin, consumers: Iterable[TrioConsumer]) -> None:
    """Until the broker has applied every ack that ``consumers`` sent so far (or
    ``ACK_WAIT`` passed: then those acks are not waited for again, so that an ack that never
    arrives, its consumer reconnected meanwhile, costs one count one wait, not every count)."""
    pending = [(c, m) for c in consumers if (m := c.last_acknowledged) is not None]
    with trio.move_on_after(ACK_WAIT):
        for consumer, message in pending:
            await _applied(admin, consumer.subscription, message)
    for consumer, message in pending:
        if consumer.last_acknowledged is message:  # nothing acknowledged since
            consumer.last_acknowledged = None


async def _applied(admin: PulsarAdmin, subscription: str, message: ReceivedMessage) -> None:
    if message.in_batch:
        # A batch's entry is acknowledged only when all of it is: the count of its other
        # messages is Pulsar's to give, whatever this one's ack did.
        return
    message_id = message.message_id
    position = (message_id.ledger_id, message_id.entry_id)
    while True:
        try:
            cursor = await admin.cursor_state(message.topic, subscription)
        except AdminError as error:  # the count that follows meets it and says why
            log.debug("cursor of %s on %s: %s", subscription, message.topic, error)
            return
        if cursor is None or cursor.acknowledged(position):
            return
        await trio.sleep(ACK_POLL)  # polling the broker's cursor until it has the ack
