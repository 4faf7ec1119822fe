"""Rules RabbitMQ applies to a message as it is published, before routing it."""

from __future__ import annotations

from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.amqp.properties import PROPERTY_FLAGS, decode_properties

_USER_ID_FLAG = PROPERTY_FLAGS["user_id"]


def check_user_id(header: bytes, user: str) -> None:
    """406 unless the message's ``user-id`` property, when set, names the connection's user
    (RabbitMQ's "validated user-id", ``rabbit_channel:check_user_id_header``; its
    ``impersonator`` tag has no counterpart here). ``header`` is the raw property flags and
    list; only a message with the flag set is decoded."""
    if len(header) < 2 or not int.from_bytes(header[:2], "big") & _USER_ID_FLAG:
        return
    claimed = decode_properties(header).user_id
    if isinstance(claimed, bytes):
        claimed = claimed.decode("utf-8", "replace")
    if claimed != user:
        raise ChannelError(
            ReplyCode.PRECONDITION_FAILED,
            f"user_id property set to '{claimed}' but authenticated user was '{user}'",
        )
