"""Errors of the Pulsar layer, and how they look to an AMQP client.

Two families:

* :class:`AdminError` and subclasses: the admin REST API answered with an error status, or
  could not be reached within the retry budget (:class:`Unavailable`).
* :class:`PulsarClientError` and subclasses: pulsar-client (the binary protocol) reported a
  ``Result`` other than ``Ok`` for a send, subscribe, close, ... The ``result`` attribute is the
  C++ ``Result`` name (``"Timeout"``, ``"ProducerQueueIsFull"``, ...).

:func:`to_amqp_error` turns either into the reply code a RabbitMQ user would find sensible; the
choices are documented in docs/pulsar-layer.md.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from gateway.amqp.errors import AMQPError, ChannelError, ConnectionException, ReplyCode

# ---------------------------------------------------------------------------------------------
# Admin REST API


class AdminError(Exception):
    """The admin REST API refused a request (any status without a more specific subclass)."""

    def __init__(self, status: int | None, method: str, path: str, reason: str) -> None:
        self.status = status
        self.method = method
        self.path = path
        self.reason = reason
        where = f"{method} {path}"
        super().__init__(f"{where}: {status} {reason}" if status else f"{where}: {reason}")


class NotFound(AdminError):
    """404: the tenant, namespace, topic or subscription does not exist."""


class Conflict(AdminError):
    """409: it already exists, or the namespace is not empty."""


class PreconditionFailed(AdminError):
    """412: e.g. active consumers on a subscription, an invalid name."""


class Unauthorized(AdminError):
    """401 or 403: the token is missing, wrong, or lacks the permission."""


class Unavailable(AdminError):
    """No answer within the retry budget: connection refused, timeouts, 5xx every time."""


def admin_error_for(status: int, method: str, path: str, reason: str) -> AdminError:
    """The exception class for an HTTP error status."""
    cls: type[AdminError]
    if status == 404:
        cls = NotFound
    elif status == 409:
        cls = Conflict
    elif status == 412:
        cls = PreconditionFailed
    elif status in (401, 403):
        cls = Unauthorized
    elif status >= 500:
        cls = Unavailable
    else:
        cls = AdminError
    return cls(status, method, path, reason)


# ---------------------------------------------------------------------------------------------
# pulsar-client (binary protocol)


class PulsarClientError(Exception):
    """pulsar-client reported a failure; ``result`` is the C++ ``Result`` name."""

    def __init__(self, result: str, message: str = "") -> None:
        self.result = result
        self.message = message
        super().__init__(f"{result}: {message}" if message else result)


class ClosedError(PulsarClientError):
    """The producer, consumer or client was closed (by us, or ``AlreadyClosed`` from C++)."""

    def __init__(self, message: str = "closed") -> None:
        super().__init__("AlreadyClosed", message)


class SendError(PulsarClientError):
    """A message was not persisted (timeout, queue full, too big, topic terminated, ...)."""


# Results that mean "Pulsar (or the path to it) is unhealthy right now", as opposed to "this
# request is wrong". They close the AMQP connection so that the client reconnects, possibly to
# another gateway replica.
_TRANSIENT_RESULTS = frozenset(
    {
        "Timeout",
        "ConnectError",
        "ReadError",
        "NotConnected",
        "LookupError",
        "ServiceUnitNotReady",
        "TooManyLookupRequestException",
        "BrokerMetadataError",
        "BrokerPersistenceError",
        "ProducerQueueIsFull",
        "MemoryBufferIsFull",
        "UnknownError",
    }
)
_AUTH_RESULTS = frozenset({"AuthenticationError", "AuthorizationError"})


def is_transient(err: BaseException) -> bool:
    """Whether retrying later may succeed (used by callers deciding to retry or give up)."""
    if isinstance(err, Unavailable):
        return True
    if isinstance(err, PulsarClientError):
        return err.result in _TRANSIENT_RESULTS
    return False


# ---------------------------------------------------------------------------------------------
# Mapping to AMQP reply codes


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
