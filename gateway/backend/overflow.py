"""A publish refused by a full queue (``x-overflow`` reject-publish, model/length_limit.py):
the publisher's confirm is Basic.Nack, once the copies for the other queues it reached are
stored (RabbitMQ: "the message will still be published to all other queues which can enqueue
it", and the channel nacks it)."""

from __future__ import annotations

from gateway.backend.interface import AlreadyStored, Stored

__all__ = ["QueueFull", "RefusedStored"]


class QueueFull(Exception):
    """The message was refused by at least one queue at its length limit."""


class RefusedStored:
    """``Stored`` for a publish some queue refused: ``durable`` raises (the confirm is a nack)
    after ``written`` (the write for the other queues, if any) is done."""

    def __init__(self, queues: list[str], written: Stored | None = None) -> None:
        self._queues = queues
        self._written: Stored = written if written is not None else AlreadyStored()

    def done(self) -> bool:
        return self._written.done()

    async def durable(self) -> None:
        await self._written.durable()
        raise QueueFull(f"refused by full queue(s) {', '.join(sorted(self._queues))}")
