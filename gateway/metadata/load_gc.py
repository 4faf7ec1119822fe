"""Python's cyclic garbage collector, paused while namespaces load and told to leave the
loaded objects alone afterwards.

A namespace of a million queues + bindings is ~4 million objects the collector tracks (queues,
bindings, the index's sets). Loading it allocates them in a burst, and every time the oldest
generation has grown by a quarter the collector walks all of it: ~25% of the load's CPU
(measured: 42 -> 32 CPU s for a million). Once loaded, a full collection walks them again
(2-5 s for 4 million objects on the development machine) each time enough new objects have
survived: a stall of the trio thread that would show as seconds of watch lag.

So the first load of each namespace holds the collector off (``hold``; loads of several
namespaces overlap, the last ``release`` lets go), and then, if one of them was large
(``FREEZE_FROM`` entities), ``gc.freeze()`` moves everything alive into the permanent
generation, which collections skip. The mirror's objects hold no
reference cycles (frozen dataclasses, strings, sets): reference counting frees them when a
change drops them, so freezing them costs nothing. What freeze would keep forever is cyclic
garbage that happened to be alive at that moment: a few dozen objects after a million-queue
load (measured), once per load.
"""

from __future__ import annotations

import gc

__all__ = ["FREEZE_FROM", "LOAD_GC", "LoadGc"]

#: A load of at least this many entities freezes what is alive when the loads are over.
FREEZE_FROM = 10_000


class LoadGc:
    """Counts the loads in progress; the collector is off while there is one (if it was on
    when the first began)."""

    def __init__(self) -> None:
        self._loads = 0
        self._was_enabled = False
        self._freeze = False

    @property
    def loads(self) -> int:
        return self._loads

    def hold(self) -> None:
        if self._loads == 0:
            self._was_enabled = gc.isenabled()
            gc.disable()
        self._loads += 1

    def release(self, *, freeze: bool = True) -> None:
        """One load is over; ``freeze``: it was large enough for its objects to be frozen
        (small loads, a vhost declared at run time, leave the collector as it was)."""
        if self._loads == 0:
            raise RuntimeError("LoadGc.release without hold")
        self._loads -= 1
        self._freeze = self._freeze or freeze
        if self._loads == 0:
            if self._was_enabled:
                if self._freeze:
                    gc.freeze()
                gc.enable()
            self._freeze = False


#: One per process: the collector is.
LOAD_GC = LoadGc()
