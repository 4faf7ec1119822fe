"""Slowing down repeated login failures from one address, and nobody else.

A client (or an attacker) that keeps failing to log in from one address gets its refusals later
and later, up to a cap: the delay is served by that connection's own task while it waits to be
refused, so no other connection, and no successful login, ever waits for it. A user's single
typo is not delayed at all.

Pure bookkeeping (the caller passes the clock and does the waiting); memory is bounded: the
addresses seen least recently are forgotten first, and failures older than the window do not
count.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["FailureThrottle"]


@dataclass
class _Record:
    failures: int
    last: float


class FailureThrottle:
    def __init__(
        self,
        *,
        free_failures: int = 2,
        first_delay: float = 0.25,
        max_delay: float = 2.0,
        window: float = 60.0,
        max_addresses: int = 10_000,
    ) -> None:
        """The first ``free_failures`` failures within ``window`` seconds are refused at once;
        each later one waits twice as long as the previous, from ``first_delay`` up to
        ``max_delay`` seconds (0 disables the delay)."""
        self._free = free_failures
        self._first = first_delay
        self._max = max_delay
        self._window = window
        self._max_addresses = max_addresses
        self._records: OrderedDict[str, _Record] = OrderedDict()

    def failed(self, address: str, now: float) -> float:
        """Record a failure from ``address``; return how long to wait before refusing it."""
        record = self._records.pop(address, None)
        if record is None or now - record.last > self._window:
            record = _Record(0, now)
        record.failures += 1
        record.last = now
        self._records[address] = record  # most recently seen last
        while len(self._records) > self._max_addresses:
            self._records.popitem(last=False)
        excess = record.failures - self._free
        if excess <= 0 or self._max <= 0:
            return 0.0
        return min(self._max, self._first * float(2 ** min(excess - 1, 32)))

    def failures(self, address: str, now: float) -> int:
        """Failures from ``address`` still counted at ``now`` (for tests and metrics)."""
        record = self._records.get(address)
        if record is None or now - record.last > self._window:
            return 0
        return record.failures
