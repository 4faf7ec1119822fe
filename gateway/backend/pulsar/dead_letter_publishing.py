"""Dead-lettering on Pulsar: a queue's dead letter is published to its dead-letter exchange,
and only once Pulsar has stored it is the original acknowledged.

RabbitMQ's classic queues dead-letter "at most once" (docs/dlx.md, "Safety": republished
without confirms, removed from the queue at once). Here the letter is written like any
publish, through the exchange's topics (so bindings made on any replica route it, and an
alternate exchange catches what the dead-letter exchange does not route), and the caller
acknowledges the original only after ``dead_letter`` returned: a failure or a crash in
between leaves the original in its queue, to be delivered again (at least once).

The dead-letter exchange is looked up in the metadata view, and in ZooKeeper on a miss, so an
exchange declared on another replica a moment ago is found; one that does not exist drops the
letter (RabbitMQ: "If it is missing then, the messages are silently dropped").

Automatic loops (expired/maxlen, no rejection on the way, back into a queue the message left)
are cut as RabbitMQ cuts them, per target queue: the queues the letter would reach that do not
close a loop get it on their own topic (the default exchange's, which only that queue reads).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from gateway.backend.catalog import Catalog
from gateway.backend.dead_letter_message import letter_for
from gateway.backend.interface import Message, PublishOutcome
from gateway.backend.overflow import QueueFull
from gateway.model.dead_letter import Reason
from gateway.model.entities import Exchange

log = logging.getLogger("gateway.pulsar.dead_lettering")

# Publishes a message through an exchange (routing it as Basic.Publish does, alternate
# exchanges included) and tells when it is stored.
Send = Callable[[Exchange, Message], Awaitable[PublishOutcome]]
# Writes a message to one queue's own topic and returns once Pulsar stored it.
WriteToQueue = Callable[[str, Message], Awaitable[None]]


class DeadLettering:
    """One vhost's dead-lettering."""

    def __init__(self, catalog: Catalog, send: Send, write_to_queue: WriteToQueue) -> None:
        self._catalog = catalog
        self._send = send
        self._write_to_queue = write_to_queue

    async def dead_letter(self, queue: str, message: Message, reason: Reason) -> None:
        """Send ``message``, leaving ``queue`` for ``reason``, to the queue's dead-letter
        exchange; return once Pulsar stored it, or at once if the queue has none (or it does
        not exist, or the letter would loop). Raises if the letter could not be stored."""
        catalog = self._catalog
        entity = catalog.view.queues.get(queue)
        if entity is None:
            return  # deleted meanwhile: its messages went with it
        letter = letter_for(message, entity, reason)
        if letter is None:
            return
        exchange = await catalog.find_exchange(letter.message.exchange)
        if exchange is None:
            log.debug("dead-letter exchange of queue '%s' does not exist: dropped", queue)
            return
        if reason != "rejected":
            targets = catalog.destinations(catalog.view, exchange, letter.message)
            looping = {target for target in targets if letter.cycles(target)}
            if looping:
                for target in sorted(targets - looping):
                    await self._write_to_queue(target, letter.message)
                return
        outcome = await self._send(exchange, letter.message)
        try:
            await outcome.stored.durable()
        except QueueFull:
            # A full reject-publish queue refuses dead letters too (RabbitMQ drops them);
            # the other queues the letter reached have it.
            log.debug("a dead letter of queue '%s' was refused by a full queue", queue)
