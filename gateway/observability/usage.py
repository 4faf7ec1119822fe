"""Usage windows: turning this process's running counters into per-vhost usage events.

Pure bookkeeping (no Pulsar): ``usage_publisher.py`` in the shell sends what this builds.

The counters only grow; an event carries the *difference* since the counts the previous event
of its vhost claimed. Counts are claimed when an event is built, and an event, once built, never
changes: a retried send carries the same id and content (Pulsar's deduplication and the
rollup's both drop the second copy). While events wait to be sent (Pulsar or ZooKeeper down),
no new window is cut: the counts made meanwhile stay unclaimed and the first window after the
outage covers the whole time since the last one, so nothing is lost or counted twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from gateway.observability.counters import ProcessCounters, VhostCounters
from gateway.observability.usage_event import UsageEvent

__all__ = ["UsageWindows"]

# UsageEvent field -> how to read it off a vhost's counters (all monotonic).
_FIELDS: Final[tuple[tuple[str, Callable[[VhostCounters], int]], ...]] = (
    ("published_messages", lambda c: c.received),
    ("published_bytes", lambda c: c.received_bytes),
    ("routed_messages", lambda c: c.routed),
    ("routed_bytes", lambda c: c.routed_bytes),
    ("delivered_messages", lambda c: c.delivered),
    ("delivered_bytes", lambda c: c.delivered_bytes),
    # Settled by an ack: the client's Basic.Ack, or automatically (no-ack deliveries).
    (
        "acknowledged_messages",
        lambda c: c.acknowledged + c.delivered_consume_auto_ack + c.delivered_get_auto_ack,
    ),
    ("acknowledged_bytes", lambda c: c.acknowledged_bytes),
    ("returned_messages", lambda c: c.unroutable_returned),
    ("returned_bytes", lambda c: c.returned_bytes),
)


class UsageWindows:
    """Cuts windows for one replica process. ``replica`` must be unique per process start
    (event ids are ``<replica>:<sequence>``)."""

    def __init__(
        self,
        counters: ProcessCounters,
        replica: str,
        namespace_of: Callable[[str], str],
        start_ms: int,
    ) -> None:
        self._counters = counters
        self.replica = replica
        self._namespace_of = namespace_of
        self._claimed: dict[str, tuple[int, ...]] = {}
        self._window_start_ms = start_ms
        self._sequence = 0

    @property
    def counters(self) -> ProcessCounters:
        return self._counters

    @property
    def next_sequence(self) -> int:
        return self._sequence

    def cut(self, now_ms: int) -> list[UsageEvent]:
        """Close the window at ``now_ms``: one event per vhost that was active in it (counted
        anything, or had a connection open), its counts claimed."""
        start = self._window_start_ms
        end = max(now_ms, start)
        events: list[UsageEvent] = []
        for name, counters in list(self._counters.vhosts.items()):
            current = tuple(read(counters) for _, read in _FIELDS)
            before = self._claimed.get(name, (0,) * len(_FIELDS))
            deltas = [now - then for now, then in zip(current, before, strict=True)]
            peak = max(counters.peak_connections, counters.connections)
            if any(deltas) or peak > 0:
                try:
                    namespace = self._namespace_of(name)
                except ValueError:
                    namespace = name  # cannot happen for a vhost that was opened
                events.append(
                    UsageEvent(
                        event_id=f"{self.replica}:{self._sequence}",
                        replica=self.replica,
                        sequence=self._sequence,
                        vhost=name,
                        namespace=namespace or name or "-",
                        window_start_ms=start,
                        window_end_ms=end,
                        connections=max(0, counters.connections),
                        peak_connections=peak,
                        **{field: delta for (field, _), delta in zip(_FIELDS, deltas, strict=True)},
                    )
                )
                self._sequence += 1
            self._claimed[name] = current
            # The next window's peak starts from what is open now.
            counters.peak_connections = max(0, counters.connections)
        self._window_start_ms = end
        return events
