"""A replica's copy of one namespace's znodes, and the rules that keep it current.

This is the pure part of the ZooKeeper store (no I/O, no threads): the store feeds it what
ZooKeeper answered, in the order ZooKeeper answered it, and asks it what to read next.

Why order is enough: ZooKeeper processes one session's requests in order and answers them in
order, so applying answers in arrival order replays the server's history as this session saw
it. A listing taken after our own write contains it; an answer that arrives after a newer one
cannot exist. The store applies every answer (listings, reads, and the results of its own
writes) in that order, on the trio thread.

What order is not enough for: a watch only says "this bucket's children changed", and by the
time we list it again a child may have been deleted *and re-created* (an exclusive queue
re-declared by another connection, with another owner). Names alone cannot show that. The
bucket's ``cversion`` can: ZooKeeper adds one per child created or deleted, so when it grew by
more than the changes we can account for (children added + children removed + our own writes
since the last listing), some child was replaced behind our back, and every child of that
bucket is read again. That costs a re-read of one bucket (1/256 of the folder) in a rare case,
instead of a data watch per znode.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

from gateway.metadata.codec import (
    TopicKey,
    binding_from_child,
    decode_binding,
    decode_exchange,
    decode_queue,
    topic_key_from_child,
)
from gateway.metadata.paths import Folder, bucket_of
from gateway.metadata.store import VhostView
from gateway.model.entities import Binding, Exchange, Queue

__all__ = ["Entity", "NamespaceMirror", "make_view"]

log = logging.getLogger(__name__)

Entity = Exchange | Queue | Binding | TopicKey
_E = TypeVar("_E", Exchange, Queue, Binding, TopicKey)


def make_view(
    version: int,
    exchanges: Iterable[Exchange],
    queues: Iterable[Queue],
    bindings: Iterable[Binding],
    topic_keys: Iterable[TopicKey],
) -> VhostView:
    """An immutable view. A binding is shown only while its queue and its exchange are: the
    store deletes them together, but a replica may learn of the parts at different moments."""
    exchange_map = {exchange.name: exchange for exchange in exchanges}
    queue_map = {queue.name: queue for queue in queues}
    binding_set = frozenset(
        binding
        for binding in bindings
        if binding.queue in queue_map and binding.exchange in exchange_map
    )
    keys: dict[str, set[str]] = {}
    for key in topic_keys:
        keys.setdefault(key.exchange, set()).add(key.routing_key)
    return VhostView(
        version=version,
        exchanges=MappingProxyType(exchange_map),
        queues=MappingProxyType(queue_map),
        bindings=binding_set,
        topic_keys=MappingProxyType({name: frozenset(found) for name, found in keys.items()}),
    )


def name_only_entity(folder: Folder, child: str) -> Entity | None:
    """The entity when its znode name says everything about it (a binding without arguments,
    a topic key); None when the data must be read. ValueError for a name we did not write."""
    if folder is Folder.BINDINGS:
        return binding_from_child(child)
    if folder is Folder.TOPIC_KEYS:
        return topic_key_from_child(child)
    return None


def decode_entity(folder: Folder, child: str, data: bytes) -> Entity:
    if folder is Folder.EXCHANGES:
        return decode_exchange(child, data)
    if folder is Folder.QUEUES:
        return decode_queue(child, data)
    if folder is Folder.BINDINGS:
        return decode_binding(child, data)
    return topic_key_from_child(child)


@dataclass(eq=False)
class _Bucket:
    # Children as of the last listing, plus our own creates and minus our own deletes since.
    names: set[str] = field(default_factory=set)
    # The bucket's cversion in the last listing (None before the first).
    cversion: int | None = None
    # Our own creates and deletes applied since the last listing.
    own_changes: int = 0
    entities: dict[str, Entity] = field(default_factory=dict)


class NamespaceMirror:
    """The znodes of one namespace as this replica knows them, and the view built from them."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.version = 0
        self._folders: dict[Folder, dict[str, _Bucket]] = {folder: {} for folder in Folder}
        self._snapshot: VhostView | None = None

    # ------------------------------------------------------------------ reading

    def snapshot(self) -> VhostView:
        """The view at the current version (built once per version)."""
        snapshot = self._snapshot
        if snapshot is None or snapshot.version != self.version:
            snapshot = self._snapshot = make_view(
                self.version,
                self._entities(Folder.EXCHANGES, Exchange),
                self._entities(Folder.QUEUES, Queue),
                self._entities(Folder.BINDINGS, Binding),
                self._entities(Folder.TOPIC_KEYS, TopicKey),
            )
        return snapshot

    def _entities(self, folder: Folder, kind: type[_E]) -> Iterator[_E]:
        for bucket in self._folders[folder].values():
            for entity in bucket.entities.values():
                if isinstance(entity, kind):
                    yield entity

    def get(self, folder: Folder, child: str) -> Entity | None:
        bucket = self._folders[folder].get(bucket_of(child))
        return None if bucket is None else bucket.entities.get(child)

    def children(self, folder: Folder) -> Iterator[str]:
        for bucket in self._folders[folder].values():
            yield from bucket.entities

    def known_buckets(self, folder: Folder) -> list[str]:
        return list(self._folders[folder])

    def counts(self) -> dict[str, int]:
        return {
            folder.value: sum(len(b.entities) for b in buckets.values())
            for folder, buckets in self._folders.items()
        }

    # ------------------------------------------------------------------ listings and reads

    def apply_folder_listing(self, folder: Folder, buckets: Iterable[str]) -> None:
        """A folder's buckets. A bucket missing from the listing was deleted with its contents
        (only a namespace deleted from outside does that), so its entities go."""
        known = self._folders[folder]
        listed = set(buckets)
        for gone in [name for name in known if name not in listed]:
            if known.pop(gone).entities:
                self._changed()

    def apply_bucket_listing(
        self, folder: Folder, bucket_name: str, children: Sequence[str], cversion: int
    ) -> list[str]:
        """A bucket's children and cversion, from one listing; returns the children whose data
        must be read (new ones, and all of them when a replacement may have been missed)."""
        bucket = self._bucket(folder, bucket_name)
        listed = set(children)
        accounted = len(listed - bucket.names) + len(bucket.names - listed) + bucket.own_changes
        suspicious = bucket.cversion is None or cversion != bucket.cversion + accounted
        gone = [child for child in bucket.entities if child not in listed]
        for child in gone:
            del bucket.entities[child]
        if gone:
            self._changed()
        bucket.names = listed
        bucket.cversion = cversion
        bucket.own_changes = 0
        to_read: list[str] = []
        for child in children:
            known = bucket.entities.get(child)
            if known is not None and not suspicious:
                continue
            try:
                entity = name_only_entity(folder, child)
            except ValueError:
                log.warning("metadata: ignoring znode %r in %s: not a name we write", child, folder)
                continue
            if entity is None:
                to_read.append(child)
            elif entity != known:
                bucket.entities[child] = entity
                self._changed()
        return to_read

    def apply_missing_bucket(self, folder: Folder, bucket_name: str) -> None:
        """Listing the bucket found no such node."""
        bucket = self._folders[folder].pop(bucket_name, None)
        if bucket is not None and bucket.entities:
            self._changed()

    def apply_data(self, folder: Folder, child: str, data: bytes | None) -> None:
        """A read of a child's data (None: the node was gone when read)."""
        bucket = self._folders[folder].get(bucket_of(child))
        if bucket is None:
            return
        if data is None:
            # Deleted after the listing that named it; the next listing confirms it.
            if bucket.entities.pop(child, None) is not None:
                self._changed()
            return
        if child not in bucket.names:
            return  # a newer listing no longer has it
        try:
            entity = decode_entity(folder, child, data)
        except (ValueError, KeyError, TypeError) as error:
            log.warning("metadata: ignoring znode %r in %s: %s", child, folder, error)
            return
        if bucket.entities.get(child) != entity:
            bucket.entities[child] = entity
            self._changed()

    # ------------------------------------------------------------------ own writes

    def own_created(self, folder: Folder, child: str, entity: Entity) -> None:
        bucket = self._bucket(folder, bucket_of(child))
        bucket.names.add(child)
        bucket.own_changes += 1
        bucket.entities[child] = entity
        self._changed()

    def own_deleted(self, folder: Folder, child: str) -> None:
        bucket = self._bucket(folder, bucket_of(child))
        bucket.names.discard(child)
        bucket.own_changes += 1
        if bucket.entities.pop(child, None) is not None:
            self._changed()

    def learned(self, folder: Folder, child: str, entity: Entity) -> None:
        """A read outside the listings found ``entity`` (the winner of a create race): show it
        now. It is not added to the bucket's names, so the next listing still accounts for
        its creation."""
        bucket = self._bucket(folder, bucket_of(child))
        if bucket.entities.get(child) != entity:
            bucket.entities[child] = entity
            self._changed()

    def forget(self, folder: Folder, child: str) -> None:
        """A write found ``child`` absent from the store: stop showing it."""
        bucket = self._folders[folder].get(bucket_of(child))
        if bucket is not None and bucket.entities.pop(child, None) is not None:
            self._changed()

    # ------------------------------------------------------------------ internals

    def _bucket(self, folder: Folder, name: str) -> _Bucket:
        buckets = self._folders[folder]
        bucket = buckets.get(name)
        if bucket is None:
            bucket = buckets[name] = _Bucket()
        return bucket

    def _changed(self) -> None:
        self.version += 1
