"""Errors of the Pulsar layer.

Two families:

* :class:`AdminError` and subclasses: the admin REST API answered with an error status, or
  could not be reached within the retry budget (:class:`Unavailable`).
* :class:`PulsarClientError` and subclasses: pulsar-client (the binary protocol) reported a
  ``Result`` other than ``Ok`` for a send, subscribe, close, ... The ``result`` attribute is the
  C++ ``Result`` name (``"Timeout"``, ``"ProducerQueueIsFull"``, ...).

``gateway/backend/pulsar/reply_codes.py`` (``to_amqp_error``) turns either into the reply code
a RabbitMQ user would find sensible: this layer knows nothing of AMQP.
"""

from __future__ import annotations

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


def is_transient(err: BaseException) -> bool:
    """Whether retrying later may succeed (used by callers deciding to retry or give up)."""
    if isinstance(err, Unavailable):
        return True
    if isinstance(err, PulsarClientError):
        return err.result in _TRANSIENT_RESULTS
    return False
