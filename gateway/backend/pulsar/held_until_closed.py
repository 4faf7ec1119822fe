"""Per queue, the consumers taken out of use and not closed yet, each held until it is closed.

A queue's deletion removes its subscriptions from Pulsar, and a consumer still connected then
(closing, or retired while a client holds deliveries of it) is disconnected by the removal:
pulsar-client subscribes it again, creating the subscription anew, which outlives it. So the
vhost's retired consumers and the Basic.Get consumers that left their place (vhost.py,
basic_get.py) are kept here until closed, for the deletion to close them first; each is
dropped once its ``close_done`` is set, and its queue's entry with the last.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Generic, Protocol, TypeVar

import trio

__all__ = ["HeldUntilClosed"]


class Closes(Protocol):
    @property
    def close_done(self) -> trio.Event:
        """Set once closed."""
        ...


C = TypeVar("C", bound=Closes)


class HeldUntilClosed(Generic[C]):
    """Consumers held per queue until closed. Iterating gives the queues holding any."""

    def __init__(
        self,
        start_soon: Callable[[Callable[[], Awaitable[None]]], None],
        on_closed: Callable[[C], None] | None = None,
    ) -> None:
        """``start_soon`` runs the task that waits for a held consumer's close;
        ``on_closed(consumer)`` is called once it is closed, as it is dropped."""
        self._start_soon = start_soon
        self._on_closed = on_closed
        self._by_queue: dict[str, set[C]] = {}

    def hold(self, queue: str, consumer: C) -> None:
        """Hold ``consumer`` under ``queue`` until it is closed."""
        held = self._by_queue.setdefault(queue, set())
        held.add(consumer)

        async def drop_once_closed() -> None:
            await consumer.close_done.wait()
            held.discard(consumer)
            if self._on_closed is not None:
                self._on_closed(consumer)
            # The queue's set may have been taken meanwhile (``take``), and another made.
            if not held and self._by_queue.get(queue) is held:
                del self._by_queue[queue]

        self._start_soon(drop_once_closed)

    def of(self, queue: str) -> list[C]:
        """The consumers held under ``queue`` now."""
        return list(self._by_queue.get(queue, ()))

    def take(self, queue: str) -> set[C]:
        """The consumers held under ``queue``, no longer held here."""
        return self._by_queue.pop(queue, set())

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._by_queue))
