"""Metadata watch lag: how long after a write (by any replica) this replica's view shows it.

The write time is the znode's Stat ``mtime``: milliseconds since the epoch, stamped by the
ZooKeeper server that proposed the write (its clock, not the writer's), and returned with every
read of the node at no extra cost (a multiRead's answers carry each node's Stat). The moment
seen is this process's wall clock when the read's answer is applied to the view. So the figure
includes the watch notification, the re-listing and the read, and it is only as good as the
agreement between ZooKeeper's clocks and this host's (NTP keeps that to milliseconds on one
network; a host whose clock runs behind ZooKeeper's would see negative lags, counted as 0).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

__all__ = ["WatchLag", "lag_seconds"]

#: Where the lag is reported: a histogram's ``observe`` (the shell wires the Prometheus one).
WatchLag = Callable[[float], None]

_MS: Final = 1000.0


def lag_seconds(mtime_ms: int, now: float | None = None) -> float:
    """Seconds from a znode's ``mtime`` (ms) to ``now`` (epoch seconds; default: the wall
    clock), never below 0: ZooKeeper's millisecond stamp and a clock a little behind it would
    otherwise give a negative duration."""
    if now is None:
        now = time.time()
    return max(0.0, now - mtime_ms / _MS)
