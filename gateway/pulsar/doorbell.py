"""One doorbell per trio run: how the compiled listener and sender wake trio without the GIL.

The compiled module's ``Listener`` and ``Sender`` (native/listener.c, native/sender.c) queue
what pulsar-client's C++ threads give them in C; when a queue goes from empty to not empty,
the thread rings the run's doorbell (native/doorbell.c) with that object's number: a number
queued in C and an eventfd written, no Python, no GIL. A system task of the run waits for the
eventfd, takes the numbers and calls what each was registered with (the consumer's or the
producer's drain), in the order they rang.

The binding's path (bridge.TrioWaker) calls ``TrioToken.run_sync_soon`` from those threads,
which needs the GIL: while the trio thread ran Python they waited for it, and the thread that
delivers send receipts is the connection's I/O thread (docs/performance.md, "Issue 16:
waking trio without the GIL").
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

import trio

__all__ = ["Doorbell", "of_this_run"]

log = logging.getLogger(__name__)

_RUN_DOORBELL: trio.lowlevel.RunVar[Doorbell] = trio.lowlevel.RunVar("starlight_doorbell")


class Doorbell:
    """The numbers a trio run's compiled objects ring with, and what each number calls."""

    def __init__(self, module: ModuleType) -> None:
        self.native: Any = module.Doorbell()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._numbers = itertools.count(1)

    def register(self, callback: Callable[[], None]) -> int:
        """A number to ring with, which calls ``callback`` on the trio thread (it must not
        raise; hold objects weakly: bridge.weakly)."""
        number = next(self._numbers)
        self._callbacks[number] = callback
        return number

    def unregister(self, number: int) -> None:
        self._callbacks.pop(number, None)

    async def serve(self) -> None:
        """Forever: wait for a ring, call what rang. Run as a system task."""
        fd = self.native.fileno()
        take = self.native.take
        callbacks = self._callbacks
        while True:
            await trio.lowlevel.wait_readable(fd)
            numbers = take()
            if numbers is None:  # some did not fit in C's memory: call everyone
                numbers = list(callbacks)
            for number in numbers:
                callback = callbacks.get(number)
                if callback is None:
                    continue  # its object closed after it rang
                try:
                    callback()
                except Exception:  # raising here would end the trio run (a system task)
                    log.exception("doorbell: a drain failed")


def of_this_run(module: ModuleType) -> Doorbell:
    """The current trio run's doorbell, made (and its task started) on first use."""
    try:
        return _RUN_DOORBELL.get()
    except LookupError:
        doorbell = Doorbell(module)
        _RUN_DOORBELL.set(doorbell)
        trio.lowlevel.spawn_system_task(doorbell.serve, name="pulsar doorbell")
        return doorbell
