"""Queue length limits as RabbitMQ defines them (rabbitmq-website ``docs/maxlength.md``).

- ``x-max-length`` bounds the number of **ready** messages, ``x-max-length-bytes`` the total
  size of their **bodies** (unacknowledged messages count for neither; properties and headers
  are not counted: ``mc:size/1`` gives the body size, which ``rabbit_variable_queue`` sums in
  ``message_bytes_ready``); with both, whichever is hit first applies;
- ``x-overflow`` says what happens at the limit: ``drop-head`` (the default) drops, or
  dead-letters with reason ``maxlen``, the oldest messages; ``reject-publish`` refuses the new
  message for that queue (the publisher gets Basic.Nack under confirms, and the message still
  goes to the other queues it is routed to); ``reject-publish-dlx`` also dead-letters the
  refused message;
- ``x-overflow`` without a limit does nothing.

``rabbit_amqqueue_process``: a publish overflows when the count after it is over
``max_length`` or the bytes after it are over ``max_bytes`` (``will_overflow``); drop-head
drops from the head while the count is over ``max_length`` or the bytes are over
``max_bytes`` (``maybe_drop_head``/``over_max_length``). So a body larger than the byte limit
is always refused by reject-publish, and under drop-head it pushes everything out, itself
included; a limit of 0 bytes still takes empty bodies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from gateway.amqp.fieldtable import Field
from gateway.model.arguments import is_stream

__all__ = ["DROP_HEAD", "LengthLimit", "Overflow", "length_limit"]

Overflow = Literal["drop-head", "reject-publish", "reject-publish-dlx"]
DROP_HEAD: Final = "drop-head"


@dataclass(frozen=True)
class LengthLimit:
    max_length: int | None  # x-max-length (messages), if set
    overflow: Overflow = "drop-head"
    max_bytes: int | None = None  # x-max-length-bytes (body bytes), if set

    @property
    def rejects_publish(self) -> bool:
        return self.overflow != DROP_HEAD

    @property
    def dead_letters_rejected(self) -> bool:
        return self.overflow == "reject-publish-dlx"

    def has_room(self, ready: int, ready_bytes: int = 0, size: int = 0) -> bool:
        """Whether a queue with ``ready`` messages of ``ready_bytes`` body bytes takes one
        more, of ``size`` bytes (reject-publish)."""
        if self.max_length is not None and ready >= self.max_length:
            return False
        return self.max_bytes is None or ready_bytes + size <= self.max_bytes

    def over(self, ready: int, ready_bytes: int = 0) -> bool:
        """Whether the head must go (drop-head): over either limit."""
        if self.max_length is not None and ready > self.max_length:
            return True
        return self.max_bytes is not None and ready_bytes > self.max_bytes

    def excess(self, ready: int) -> int:
        """How many of the oldest messages the count limit drops (drop-head) when ``ready``
        are ready (the byte limit depends on their sizes: ``over``)."""
        return 0 if self.max_length is None else max(0, ready - self.max_length)


def _int_argument(arguments: Mapping[str, Field], key: str) -> int | None:
    field = arguments.get(key)
    return None if field is None else int(field.value)


def length_limit(arguments: Mapping[str, Field]) -> LengthLimit | None:
    """A queue's limits from its (validated) arguments, or None. A stream has none: its
    ``x-max-length-bytes`` is its retention (model/streams.py)."""
    if is_stream(arguments):
        return None
    max_length = _int_argument(arguments, "x-max-length")
    max_bytes = _int_argument(arguments, "x-max-length-bytes")
    if max_length is None and max_bytes is None:
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
    return LengthLimit(max_length, mode, max_bytes)
