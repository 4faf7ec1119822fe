"""Basic.Publish's ``expiration`` property, checked as RabbitMQ checks it (model/ttl.py)."""

from __future__ import annotations

from typing import Final

from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.amqp.properties import PROPERTY_FLAGS
from gateway.backend.interface import Message
from gateway.model.ttl import expiration_error

__all__ = ["check_expiration"]

_EXPIRATION_FLAG: Final = PROPERTY_FLAGS["expiration"]


def check_expiration(message: Message) -> None:
    """406 for a message whose ``expiration`` is not a valid TTL (``rabbit_channel``:
    ``invalid expiration '<value>': <reason>``). The flag is read from the raw header, so
    a message without one (nearly all) is not decoded."""
    header = message.header
    if len(header) < 2 or not ((header[0] << 8) | header[1]) & _EXPIRATION_FLAG:
        return
    value = message.properties.expiration
    if value is None:
        return
    text = value if isinstance(value, str) else value.decode("utf-8", "replace")
    reason = expiration_error(text)
    if reason is not None:
        raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"invalid expiration '{text}': {reason}")
