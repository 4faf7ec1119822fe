"""A message as the backends store and deliver it (re-exported by ``backend/interface.py``).

Its own module so that backend/replies.py (direct reply-to) can name it without importing
the interface that holds a ``ReplyRegistry``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from gateway.amqp.properties import MessageProperties, decode_properties

__all__ = ["Message"]


@dataclass(frozen=True)
class Message:
    """A message as published: where it was sent, its raw content properties and its body.

    ``header`` is the raw property flags + property list (``PublishReceived.header``): it is
    stored and replayed byte for byte, and decoded only when something needs a value.
    """

    exchange: str
    routing_key: str
    header: bytes
    body: bytes = field(repr=False)

    @cached_property
    def properties(self) -> MessageProperties:
        return decode_properties(self.header)
