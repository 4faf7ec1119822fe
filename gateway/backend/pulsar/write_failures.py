"""A publish's ``Stored`` that fails with the AMQP error a RabbitMQ client would get, not
with Pulsar's: the channel logic (a channel's writes without confirms, server/write_watch.py)
closes the channel with that error and needs to know nothing of Pulsar (reply_codes.py maps).

The messages of one grouped send share one ``Stored`` (gateway/pulsar/producer.py), and the
confirms and the watch of writes look at one per group by identity; so the vhost keeps its
last translated outcome (``PublishFailures``) and hands the same one out while the next
message's ``Stored`` is the same: per message, two checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.amqp.errors import AMQPError
from gateway.backend.interface import AlreadyStored, PublishOutcome, Stored
from gateway.backend.overflow import QueueFull
from gateway.backend.pulsar.reply_codes import to_amqp_error

__all__ = ["AMQPStored", "PublishFailures"]

_WHAT = "publishing"


def _as_amqp(error: BaseException) -> BaseException:
    """``error`` as the client would get it; a full queue's refusal is not a failure of the
    write (reject-publish: a nack, or nothing without confirms) and stays what it is."""
    if isinstance(error, AMQPError | QueueFull):
        return error
    return to_amqp_error(error, _WHAT)


class AMQPStored:
    """``Stored`` of a write whose failure is an ``AMQPError`` (a ``QueueFull`` refusal
    passes unchanged). A Pulsar send handle's other members (``add_done_callback``, ``error``,
    ``ok``) are its own, with the error translated."""

    __slots__ = ("_inner",)

    def __init__(self, inner: Stored) -> None:
        self._inner = inner

    def done(self) -> bool:
        return self._inner.done()

    async def durable(self) -> None:
        try:
            await self._inner.durable()
        except Exception as error:
            translated = _as_amqp(error)
            if translated is error:
                raise
            raise translated from None

    @property
    def error(self) -> BaseException | None:
        error: BaseException | None = getattr(self._inner, "error", None)
        return None if error is None else _as_amqp(error)

    def __getattr__(self, name: str) -> Any:
        # Only what the class does not define: the handle's ``ok``, ``add_done_callback`` …
        member = getattr(self._inner, name)
        if name == "add_done_callback":
            return self._add_done_callback
        return member

    def _add_done_callback(self, callback: Callable[[AMQPStored], None]) -> None:
        self._inner.add_done_callback(lambda _handle: callback(self))  # type: ignore[attr-defined]


class PublishFailures:
    """One vhost's translation of its publishes' outcomes (module docstring)."""

    __slots__ = ("_raw", "_translated")

    def __init__(self) -> None:
        self._raw: Stored | None = None
        self._translated = PublishOutcome(False)

    def routed(self, stored: Stored) -> PublishOutcome:
        """``outcome`` of a routed write, without making its untranslated outcome first: a
        frozen dataclass per message published, when the messages of a group share one."""
        last = self._translated
        if stored is self._raw and last.routed:
            return last  # the next message of the same group
        return self.outcome(PublishOutcome(True, stored))

    def outcome(self, outcome: PublishOutcome) -> PublishOutcome:
        stored = outcome.stored
        last = self._translated
        if stored is self._raw and outcome.routed == last.routed:
            return last  # the next message of the same group
        if type(stored) is AlreadyStored:
            return outcome  # nothing written, nothing can fail (the watch skips these)
        self._raw = stored
        self._translated = PublishOutcome(outcome.routed, AMQPStored(stored))
        return self._translated
