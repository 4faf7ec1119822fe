"""The message a queue dead-letters, for any backend (the header rules: model/dead_letter.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway.amqp.properties import encode_properties
from gateway.backend.interface import Message
from gateway.model.dead_letter import (
    Reason,
    dead_letter_target,
    dead_lettered,
    deaths_of,
    is_cycle,
)
from gateway.model.entities import Queue

__all__ = ["Letter", "letter_for"]


@dataclass(frozen=True)
class Letter:
    """A dead-lettered message, addressed to the dead-letter exchange, and the queue it left
    (``cycles`` tells whether sending it into a given queue would close an automatic loop)."""

    message: Message
    source: str
    reason: Reason

    def cycles(self, queue: str) -> bool:
        return is_cycle(deaths_of(self.message.properties), queue)


def letter_for(
    message: Message, queue: Queue, reason: Reason, now: float | None = None
) -> Letter | None:
    """What ``queue`` (as declared) sends to its dead-letter exchange for ``message``, or
    None when it has none (the message is then simply dropped, as on RabbitMQ)."""
    target = dead_letter_target(queue.arguments)
    if target is None:
        return None
    properties = dead_lettered(
        message.properties,
        queue=queue.name,
        reason=reason,
        exchange=message.exchange,
        routing_keys=[message.routing_key],
        now=int(time.time() if now is None else now),
    )
    key = message.routing_key if target.routing_key is None else target.routing_key
    letter = Message(target.exchange, key, encode_properties(properties), message.body)
    return Letter(letter, queue.name, reason)
