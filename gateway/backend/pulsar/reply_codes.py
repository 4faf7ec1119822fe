"""Pulsar's errors (``gateway/pulsar/errors.py``) as the AMQP errors a RabbitMQ client would
expect: the reply code and whether it closes the channel or the connection. The choices are
documented in docs/pulsar-layer.md ("Errors as AMQP reply codes").
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from gateway.amqp.errors import AMQPError, ChannelError, ConnectionException, ReplyCode
from gateway.pulsar.errors import (
    AdminError,
    Conflict,
    NotFound,
    PreconditionFailed,
    PulsarClientError,
    Unauthorized,
)

__all__ = ["amqp_errors", "to_amqp_error"]

_AUTH_RESULTS = frozenset({"AuthenticationError", "AuthorizationError"})


def to_amqp_error(err: BaseException, context: str = "") -> AMQPError:
    """The AMQP error a RabbitMQ client would expect for a Pulsar-side failure.

    ``context`` (e.g. ``"queue 'q' in vhost '/'"``) is put in front of Pulsar's own reason.

    * 404 / TopicNotFound / SubscriptionNotFound → 404 NOT_FOUND, channel error (RabbitMQ's
      answer to a missing queue or exchange).
    * 401/403 / Authentication/AuthorizationError → 403 ACCESS_REFUSED, channel error.
    * 412 → 406 PRECONDITION_FAILED, channel error (e.g. "subscription has active consumers" is
      RabbitMQ's ``queue.delete if_unused`` case). MessageTooBig is also 406, like RabbitMQ's
      "message size larger than configured max size".
    * 409 → 405 RESOURCE_LOCKED, channel error (something else holds the resource).
    * ConsumerBusy / ProducerBusy / ProducerFenced → 405 RESOURCE_LOCKED (an exclusive consumer
      elsewhere: RabbitMQ's "cannot obtain exclusive access").
    * Unavailable, 5xx, timeouts, connection failures and anything unexpected → 541
      INTERNAL_ERROR, connection error: the broker is unhealthy, the client should reconnect
      (client libraries with automatic recovery only recover from connection-level errors).
    """
    prefix = f"{context}: " if context else ""
    if isinstance(err, AdminError):
        text = prefix + (err.reason or str(err))
        if isinstance(err, NotFound):
            return ChannelError(ReplyCode.NOT_FOUND, text)
        if isinstance(err, Unauthorized):
            return ChannelError(ReplyCode.ACCESS_REFUSED, text)
        if isinstance(err, PreconditionFailed):
            return ChannelError(ReplyCode.PRECONDITION_FAILED, text)
        if isinstance(err, Conflict):
            return ChannelError(ReplyCode.RESOURCE_LOCKED, text)
        return ConnectionException(ReplyCode.INTERNAL_ERROR, f"{text} (Pulsar admin API)")
    if isinstance(err, PulsarClientError):
        text = prefix + str(err)
        if err.result in ("TopicNotFound", "SubscriptionNotFound"):
            return ChannelError(ReplyCode.NOT_FOUND, text)
        if err.result in _AUTH_RESULTS:
            return ChannelError(ReplyCode.ACCESS_REFUSED, text)
        if err.result == "MessageTooBig":
            return ChannelError(ReplyCode.PRECONDITION_FAILED, text)
        if err.result in ("ConsumerBusy", "ProducerBusy", "ProducerFenced"):
            return ChannelError(ReplyCode.RESOURCE_LOCKED, text)
        return ConnectionException(ReplyCode.INTERNAL_ERROR, f"{text} (Pulsar)")
    return ConnectionException(ReplyCode.INTERNAL_ERROR, f"{prefix}{type(err).__name__}: {err}")


T = TypeVar("T")


async def amqp_errors(call: Awaitable[T], what: str) -> T:
    """Await a Pulsar (admin or client) call; any failure becomes the AMQP error a RabbitMQ
    client would expect (:func:`to_amqp_error`, ``what`` in front), never a hang."""
    try:
        return await call
    except Exception as error:
        raise to_amqp_error(error, what) from None
