"""Small caches on hot paths: a dict bounded the crude way, emptied when full.

The gateway remembers per-message work by its input (a content header's Pulsar properties, a
topic's decoded name, ...). Real workloads repeat a few inputs; one whose every input is new
gains nothing from the cache, so dropping everything at the bound costs nothing either, and
is cheaper than keeping order for an LRU on every hit.
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def remember(cache: dict[K, V], key: K, value: V, limit: int) -> None:
    """``cache[key] = value``, first emptying ``cache`` if it holds ``limit`` entries."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value
