"""The writes of a channel without publisher confirms: the first one that fails closes it.

A publisher without confirms hears of nothing stored (AMQP 0-9-1 promises no more), but a
message must not vanish without a word: when Pulsar fails a write (a send timeout, a producer
closed under it, a message it refuses), the channel is closed with the error a RabbitMQ client
would get for it (``to_amqp_error``: e.g. 406 for a message Pulsar finds too large, 541
INTERNAL_ERROR, a connection error, for a broker that does not answer), so that the client
knows that messages from about then on may be missing, as it would from a nack in confirm
mode. Before issue 37 such a failure was only logged by pulsar-client.

A message refused by a full queue with ``x-overflow=reject-publish`` is not a failure here:
RabbitMQ drops it silently without confirms (its documentation, "Queue Length Limit"), and so
does the gateway.

Cost: the messages of one grouped send share one ``Stored`` (gateway/pulsar/producer.py), so
the watch looks at one per group; a Pulsar send handle reports through a done-callback (no
task, no wait). Any other ``Stored`` that is not done yet (writes through exchange bindings,
AllStored) is awaited by a task of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from gateway.backend.interface import AlreadyStored, Stored, done_callbacks
from gateway.backend.overflow import QueueFull

log = logging.getLogger("gateway.session")

__all__ = ["WriteWatch"]


class _Reporting(Protocol):
    """A ``Stored`` that reports its outcome to callbacks (gateway/pulsar/producer.py's
    ``SendHandle``)."""

    @property
    def error(self) -> BaseException | None: ...

    def add_done_callback(self, callback: Callable[[Any], None]) -> None: ...


class WriteWatch:
    __slots__ = ("_fail", "_spawn", "failed", "last")

    def __init__(
        self,
        fail: Callable[[BaseException], None],
        spawn: Callable[[Callable[[Stored], Awaitable[None]], Stored], None],
    ) -> None:
        """``fail(error)``: close the channel (called once, on the trio thread); ``spawn``
        starts a task that awaits a ``Stored`` with no callbacks."""
        self._fail = fail
        self._spawn = spawn
        self.failed = False
        # The Stored looked at last: the next message of its group shares it (callers may
        # compare with it before calling ``add``, to save the call).
        self.last: Stored | None = None

    def add(self, stored: Stored) -> None:
        """Watch the write of the channel's next message."""
        if stored is self.last or self.failed:
            return
        self.last = stored
        if type(stored) is AlreadyStored:
            return
        report = done_callbacks(stored)
        if report is not None:
            report(self._done)
        else:
            self._spawn(self._wait, stored)

    def _done(self, handle: _Reporting) -> None:
        # In the producer's drain: quick, and never raises.
        error = handle.error
        if error is not None:
            self._failed(error)

    async def _wait(self, stored: Stored) -> None:
        try:
            await stored.durable()
        except QueueFull:
            pass  # reject-publish: RabbitMQ drops it silently without confirms (docstring)
        except Exception as error:
            self._failed(error)

    def _failed(self, error: BaseException) -> None:
        if self.failed:
            return
        self.failed = True
        log.warning("publish without confirms not stored, closing the channel: %s", error)
        self._fail(error)
