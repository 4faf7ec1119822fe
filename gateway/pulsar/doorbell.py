"""The trio side of the compiled module's Doorbell (native/doorbell.c): one system task per
trio run waits for the bell's eventfd and calls the ``on_ready`` of every compiled sender
(producer.py) that rang.

pulsar-client's I/O thread rings without the GIL when receipts are waiting, so the trio
thread, woken by the eventfd, finds the GIL free. Through ``run_sync_soon`` called from the
I/O thread (``bridge.TrioWaker``, what the compiled listener and the binding's own callbacks
still use) a lone publisher confirm took ~0.06 ms longer on the 2-core VM (docs/benchmarks.md,
"Synchronous patterns").
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

import trio

log = logging.getLogger(__name__)

__all__ = ["doorbell"]


class _Doorbell:
    """One trio run's bell and the task that answers it."""

    def __init__(self, compiled: ModuleType) -> None:
        self.native: Any = compiled.Doorbell()
        trio.lowlevel.spawn_system_task(self._run, name="pulsar receipts doorbell")

    async def _run(self) -> None:
        # The bell (and so its eventfd) lives as long as this object, which this task holds:
        # the descriptor is never closed under the wait.
        native = self.native
        fd = native.fileno()
        while True:
            # Cancelled when the run ends (system tasks are): then it just stops.
            await trio.lowlevel.wait_readable(fd)
            for on_ready in native.take():
                try:
                    on_ready()
                except Exception:  # an exception here would crash the trio run
                    log.exception("draining a producer's receipts failed")


_DOORBELL: trio.lowlevel.RunVar[_Doorbell] = trio.lowlevel.RunVar("pulsar_doorbell")


def doorbell(compiled: ModuleType) -> Any:
    """The current trio run's Doorbell object (started on first use), for ``Sender``."""
    try:
        return _DOORBELL.get().native
    except LookupError:
        bell = _Doorbell(compiled)
        _DOORBELL.set(bell)
        return bell.native
