"""The rollup's output row: one per vhost and window, the same in Parquet and PostgreSQL."""

from __future__ import annotations

from typing import Final

from gateway.observability.usage_event import COUNTER_FIELDS

__all__ = ["OUTPUT_COLUMNS", "SUMMED_FIELDS"]

#: Counters that add up across replicas and across the events of a window.
SUMMED_FIELDS: Final = tuple(name for name in COUNTER_FIELDS if not name.endswith("connections"))

OUTPUT_COLUMNS: Final = (
    "vhost",
    "namespace",
    "window_seconds",  # the window's length (rollupWindowSeconds)
    "window_start",  # UTC, inclusive
    "window_end",  # UTC, exclusive
    *SUMMED_FIELDS,
    # Sum over replicas of each replica's peak within the window: the fleet's peak if the
    # replicas peaked together, an upper bound otherwise (exact with one replica).
    "peak_connections",
    "events",  # usage events counted (after duplicates were dropped)
    "replicas",  # replicas that reported for this vhost in this window
    "batch_id",  # the Spark micro-batch that wrote the row
    "date",  # UTC date of window_start (the Parquet partition)
)
