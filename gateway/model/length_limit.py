"""Queue length limits as RabbitMQ defines them (rabbitmq-website ``docs/maxlength.md``).

- ``x-max-length`` bounds the number of **ready** messages (unacknowledged ones do not count);
- ``x-overflow`` says what happens at the limit: ``drop-head`` (the default) drops, or
  dead-letters with reason ``maxlen``, the oldest messages; ``reject-publish`` refuses the new
  message for that queue (the publisher gets Basic.Nack under confirms, and the message still
  goes to the other queues it is routed to); ``reject-publish-dlx`` also dead-letters the
  refused message;
- ``x-overflow`` without a limit does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from gateway.amqp.fieldtable import Field

__all__ = ["DROP_HEAD", "LengthLimit", "Overflow", "length_limit"]

Overflow = Literal["drop-head", "reject-publish", "reject-publish-dlx"]
DROP_HEAD: Final = "drop-head"


@dataclass(frozen=True)
class LengthLimit:
    max_length: int
    overflow: Overflow = "drop-head"

    @property
    def rejects_publish(self) -> bool:
        return self.overflow != DROP_HEAD

    @property
    def dead_letters_rejected(self) -> bool:
        return self.overflow == "reject-publish-dlx"

    def has_room(self, ready: int) -> bool:
        """Whether a queue with ``ready`` messages takes one more (reject-publish)."""
        return ready < self.max_length

    def excess(self, ready: int) -> int:
        """How many of the oldest messages go (drop-head) when ``ready`` are ready."""
        return max(0, ready - self.max_length)


def length_limit(arguments: Mapping[str, Field]) -> LengthLimit | None:
    """A queue's limit from its (validated) arguments, or None."""
    field = arguments.get("x-max-length")
    if field is None:
        return None
    overflow = arguments.get("x-overflow")
    value = None if overflow is None else overflow.value
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    mode: Overflow = DROP_HEAD
    if value == "reject-publish":
        mode = "reject-publish"
    elif value == "reject-publish-dlx":
        mode = "reject-publish-dlx"
    return LengthLimit(int(field.value), mode)
