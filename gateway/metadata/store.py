"""The metadata store: where every replica finds the vhosts' exchanges, queues and bindings.

Reads come from a local view that watches keep current, so routing a message costs no
round trip; writes go to the store and are compare-and-set, so two replicas declaring the
same name at once end with one winner that both see. A replica's view always includes its
own completed writes (it never answers from a view older than its last write).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from gateway.model.entities import Binding, Exchange, Queue


class MetadataUnavailable(Exception):
    """The store cannot be written (e.g. ZooKeeper is unreachable): a metadata change must be
    refused with a clear error; publishing and consuming go on from the view."""


def _frozen_empty() -> Mapping[str, Exchange]:
    return MappingProxyType({})


@dataclass(frozen=True)
class VhostView:
    """An immutable snapshot of one namespace's metadata. ``version`` grows with every change
    the view has seen, so a caller can tell whether something it derived is stale."""

    version: int = 0
    exchanges: Mapping[str, Exchange] = field(default_factory=_frozen_empty)
    queues: Mapping[str, Queue] = field(default_factory=lambda: MappingProxyType({}))
    bindings: frozenset[Binding] = frozenset()
    # For topic exchanges: the routing keys that have a topic (a key is registered before
    # the first message is published with it, so a later binding finds its topic).
    topic_keys: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))


class MetadataStore(Protocol):
    """Per-namespace metadata (``namespace`` is ``tenant/ns``: a vhost's Pulsar namespace)."""

    async def open(self, namespace: str) -> VhostView:
        """Load the namespace (once) and keep its view current; returns the view."""
        ...

    def view(self, namespace: str) -> VhostView:
        """The current view of an opened namespace."""
        ...

    async def changed(self, namespace: str, since_version: int) -> VhostView:
        """Wait until the view's version is above ``since_version``; return it."""
        ...

    async def create_exchange(self, namespace: str, exchange: Exchange) -> Exchange:
        """Create unless it exists; return what the store holds (the winner of a race)."""
        ...

    async def delete_exchange(self, namespace: str, name: str) -> bool:
        """Delete it and its bindings; False if it was not there."""
        ...

    async def create_queue(self, namespace: str, queue: Queue) -> Queue:
        """Create unless it exists; return what the store holds (the winner of a race)."""
        ...

    async def delete_queue(self, namespace: str, name: str) -> bool:
        """Delete it and its bindings; False if it was not there."""
        ...

    async def add_binding(self, namespace: str, binding: Binding) -> bool:
        """False if that exact binding (same arguments) was already there; raises
        ``gateway.metadata.errors.MissingEntity`` if its queue or exchange is not there."""
        ...

    async def remove_binding(self, namespace: str, binding: Binding) -> bool:
        """False if it was not there."""
        ...

    async def register_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        """Record that ``exchange`` has a topic for ``routing_key``; False if known already."""
        ...

    async def aclose(self) -> None: ...
