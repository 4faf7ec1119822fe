"""Basic.Publish's ``expiration`` property, checked as RabbitMQ checks it (model/ttl.py)."""

from __future__ import annotations

from typing import Final

from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.amqp.properties import PROPERTY_FLAGS
from gateway.backend.interface import Message
from gateway.model.ttl import expiration_error

__all__ = ["check_expiration", "has_expiration"]

_EXPIRATION_FLAG: Final = PROPERTY_FLAGS["expiration"]


def has_expiration(message: Message) -> bool:
    """Whether ``message`` carries the ``expiration`` property, read from the raw header's
    flags: a message without one (nearly all) is not decoded."""
    header = message.header
    return len(header) >= 2 and bool(((header[0] << 8) | header[1]) & _EXPIRATION_FLAG)


def check_expiration(message: Message) -> None:
    """406 for a message whose ``expiration`` is not a valid TTL (``rabbit_channel``:
    ``invalid expiration '<value>': <reason>``). The flag is read from the raw header, so
    a message without one (nearly all) is not decoded."""
    if not has_expiration(message):
        return
    value = message.properties.expiration
    if value is None:
        return
    text = value if isinstance(value, str) else value.decode("utf-8", "replace")
    reason = expiration_error(text)
    if reason is not None:
        raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"invalid expiration '{text}': {reason}")
