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
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from gateway.metadata.chunked import ChunkedDict
from gateway.metadata.codec import (
    ConsumerKey,
    DrainKey,
    OwnerKey,
    TopicKey,
    binding_from_child,
    consumer_from_child,
    decode_binding,
    decode_exchange,
    decode_exchange_binding,
    decode_queue,
    drain_from_child,
    exchange_binding_from_child,
    owner_from_child,
    topic_key_from_child,
)
from gateway.metadata.paths import Folder, bucket_for
from gateway.metadata.values import DrainRecord, VhostView
from gateway.model.consumers import LinePlace
from gateway.model.entities import Binding, Exchange, ExchangeBinding, Queue

__all__ = ["Entity", "NamespaceMirror", "make_view"]

log = logging.getLogger(__name__)

Entity = Exchange | Queue | Binding | ExchangeBinding | TopicKey | OwnerKey | ConsumerKey | DrainKey


def make_view(
    version: int,
    exchanges: Iterable[Exchange],
    queues: Iterable[Queue],
    bindings: Iterable[Binding],
    topic_keys: Iterable[TopicKey],
    owned: Iterable[str] = (),
    consumers: Iterable[ConsumerKey] = (),
    drains: Iterable[DrainKey] = (),
    exchange_bindings: Iterable[ExchangeBinding] = (),
) -> VhostView:
    """An immutable view. A binding is shown only while its queue and its exchange are (an
    exchange binding while both its exchanges are): the store deletes them together, but a
    replica may learn of the parts at different moments."""
    exchange_map = {exchange.name: exchange for exchange in exchanges}
    queue_map = {queue.name: queue for queue in queues}
    binding_set = frozenset(
        binding
        for binding in bindings
        if binding.queue in queue_map and binding.exchange in exchange_map
    )
    by_queue: dict[str, set[Binding]] = {}
    for binding in binding_set:
        by_queue.setdefault(binding.queue, set()).add(binding)
    keys: dict[str, set[str]] = {}
    for key in topic_keys:
        keys.setdefault(key.exchange, set()).add(key.routing_key)
    counts: dict[str, int] = {}
    lines: dict[str, list[LinePlace]] = {}
    for consumer in consumers:
        counts[consumer.queue] = counts.get(consumer.queue, 0) + 1
        if consumer.place is not None:
            lines.setdefault(consumer.queue, []).append(consumer.place)
    return VhostView(
        version=version,
        exchanges=MappingProxyType(exchange_map),
        queues=MappingProxyType(queue_map),
        bindings=binding_set,
        queue_bindings=MappingProxyType({q: bound(found) for q, found in by_queue.items()}),
        exchange_bindings=frozenset(
            binding
            for binding in exchange_bindings
            if binding.source in exchange_map and binding.destination in exchange_map
        ),
        topic_keys=MappingProxyType({name: frozenset(found) for name, found in keys.items()}),
        owned=frozenset(owned),
        consumers=MappingProxyType(counts),
        drains=MappingProxyType({(d.queue, d.topic): d.record for d in drains}),
        lines=MappingProxyType({q: _in_line(places) for q, places in lines.items()}),
    )


def bound(found: Collection[Binding]) -> Collection[Binding]:
    """A queue's bindings as the view keeps them (VhostView.queue_bindings): one in a tuple, a
    fourth of a frozenset's memory and ten times quicker to make (a million queues with a
    binding each: 2 s and 160 MB less); several in a frozenset."""
    if len(found) == 1:
        return tuple(found)
    return frozenset(found)


def _in_line(places: Iterable[LinePlace]) -> tuple[LinePlace, ...]:
    return tuple(sorted(places, key=lambda place: place.sequence))


def name_only_entity(folder: Folder, child: str) -> Entity | None:
    """The entity when its znode name says everything about it (a binding without arguments,
    a topic key); None when the data must be read. ValueError for a name we did not write."""
    if folder is Folder.BINDINGS:
        return binding_from_child(child)
    if folder is Folder.EXCHANGE_BINDINGS:
        return exchange_binding_from_child(child)
    if folder is Folder.TOPIC_KEYS:
        return topic_key_from_child(child)
    if folder is Folder.OWNERS:
        return owner_from_child(child)
    if folder is Folder.CONSUMERS:
        return consumer_from_child(child)
    return None


# The folders whose children's names never say everything (name_only_entity is None).
_READ_ALWAYS: Final = frozenset({Folder.EXCHANGES, Folder.QUEUES, Folder.DRAINS})


def decode_entity(folder: Folder, child: str, data: bytes) -> Entity:
    if folder is Folder.EXCHANGES:
        return decode_exchange(child, data)
    if folder is Folder.QUEUES:
        return decode_queue(child, data)
    if folder is Folder.BINDINGS:
        return decode_binding(child, data)
    if folder is Folder.EXCHANGE_BINDINGS:
        return decode_exchange_binding(child, data)
    if folder is Folder.DRAINS:
        return drain_from_child(child, data)
    if folder is Folder.OWNERS:
        return owner_from_child(child)
    if folder is Folder.CONSUMERS:
        return consumer_from_child(child)
    return topic_key_from_child(child)


@dataclass(eq=False)
class _Bucket:
    # Children as of the last listing, plus our own creates and minus our own deletes since.
    names: set[str] = field(default_factory=set)
    # The bucket's cversion in the last listing (None before the first).
    cversion: int | None = None
    # Creates and deletes applied since the last listing: our own, and those a persistent
    # watch reported (each one added one to the bucket's cversion).
    own_changes: int = 0
    entities: dict[str, Entity] = field(default_factory=dict)


class _Index:
    """The view's contents by entity name, kept up to date change by change, so that a
    snapshot is a few C-level copies (a dict of 100,000 queues copies in about a millisecond;
    rebuilding it from the buckets took 50 times longer) instead of a walk over every entity.

    A binding is visible while its queue and its exchange are both present; ``visible``
    counts, per Binding value, the visible children that carry it (two children can hold equal
    values: Decimal("1.5") == Decimal("1.50") but their encodings, hence digests, differ).
    """

    def __init__(self) -> None:
        self.exchanges: dict[str, Exchange] = {}
        # Chunked (chunked.py): a snapshot of a million of them costs microseconds.
        self.queues: ChunkedDict[str, Queue] = ChunkedDict()
        self.bindings: dict[str, Binding] = {}
        # Children by queue and by exchange: one child as a str, several in a set (a set is
        # 216 bytes and slow to make; a million queues mostly have one binding each).
        self.by_queue: dict[str, str | set[str]] = {}
        self.by_exchange: dict[str, str | set[str]] = {}
        self.visible: ChunkedDict[Binding, int] = ChunkedDict()
        # Each queue's visible bindings (for the view's queue_bindings), and the queues whose
        # set changed since the last view.
        self.queue_bindings: ChunkedDict[str, Collection[Binding]] = ChunkedDict()
        self.stale_queues: set[str] = set()
        # Exchange bindings, likewise: by child, by either exchange, and visible ones.
        self.edges: dict[str, ExchangeBinding] = {}
        self.edges_by_exchange: dict[str, set[str]] = {}
        self.visible_edges: dict[ExchangeBinding, int] = {}
        self.keys: dict[str, set[str]] = {}
        self.frozen_keys: dict[str, frozenset[str]] = {}
        # Exchanges whose frozen keys are stale: refrozen at the next view, not at every key
        # (loading 100,000 keys of one exchange must not refreeze the set 100,000 times).
        self.stale_keys: set[str] = set()
        # Records about queues: live owners, consumer counts, drains.
        self.owned: set[str] = set()
        self.consumers: dict[str, int] = {}
        self.drains: dict[tuple[str, str], DrainRecord] = {}
        # Single-active-consumer queues' consumers: queue -> consumer id -> its record's name
        # and place; the frozen lines of the last view, and the queues whose line changed since.
        self.places: dict[str, dict[str, tuple[str, LinePlace]]] = {}
        self.lines: dict[str, tuple[LinePlace, ...]] = {}
        self.stale_lines: set[str] = set()
        # Which parts of the last view are stale: a change to queues does not copy the
        # bindings again (at 100,000 each, a copy is 4 ms for the dict, 10 for the frozenset).
        self.last: VhostView | None = None
        self.exchanges_changed = self.queues_changed = self.bindings_changed = True
        self.edges_changed = True
        self.state_changed = True

    def _show_edge(self, binding: ExchangeBinding, delta: int) -> None:
        self.edges_changed = True
        count = self.visible_edges.get(binding, 0) + delta
        if count:
            self.visible_edges[binding] = count
        else:
            del self.visible_edges[binding]

    def _edge_visible(self, binding: ExchangeBinding) -> bool:
        return binding.source in self.exchanges and binding.destination in self.exchanges

    def _show_edges(self, exchange: str, delta: int) -> None:
        for child in self.edges_by_exchange.get(exchange) or ():
            binding = self.edges[child]
            if self._edge_visible(binding):
                self._show_edge(binding, delta)

    def load(self, folders: Mapping[Folder, Mapping[str, _Bucket]]) -> None:
        """Index every entity of a mirror at once (an empty index; the end of a first load):
        the same state as ``add`` of each, at a fraction of the cost for the queues and
        bindings, which are nearly all of a large vhost's entities."""
        queue_folder, binding_folder = Folder.QUEUES, Folder.BINDINGS
        for folder, buckets in folders.items():
            if folder is not queue_folder and folder is not binding_folder:
                for bucket in buckets.values():
                    for child, entity in bucket.entities.items():
                        self.add(child, entity)
        queues = {
            entity.name: entity
            for bucket in folders[queue_folder].values()
            for entity in bucket.entities.values()
            if isinstance(entity, Queue)
        }
        self.queues = ChunkedDict(queues)
        exchanges, bindings = self.exchanges, self.bindings
        by_queue, by_exchange = self.by_queue, self.by_exchange
        visible: dict[Binding, int] = {}
        shown: dict[str, list[Binding]] = {}
        for bucket in folders[binding_folder].values():
            for child, binding in bucket.entities.items():
                if not isinstance(binding, Binding):
                    continue
                bindings[child] = binding
                queue, exchange = binding.queue, binding.exchange
                _add(by_queue, queue, child)
                _add(by_exchange, exchange, child)
                if queue in queues and exchange in exchanges:
                    count = visible.get(binding)
                    if count is None:
                        visible[binding] = 1
                        found = shown.get(queue)
                        if found is None:
                            shown[queue] = [binding]
                        else:
                            found.append(binding)
                    else:
                        visible[binding] = count + 1
        self.visible = ChunkedDict(visible)
        self.queue_bindings = ChunkedDict({queue: bound(found) for queue, found in shown.items()})
        self.queues_changed = self.bindings_changed = True

    def _show(self, binding: Binding, delta: int) -> None:
        self.bindings_changed = True
        self.stale_queues.add(binding.queue)
        count = self.visible.get(binding, 0) + delta
        if count:
            self.visible[binding] = count
        else:
            del self.visible[binding]

    def _refresh_queue_bindings(self) -> None:
        visible = self.visible
        for queue in self.stale_queues:
            found = bound(
                {
                    binding
                    for child in _members(self.by_queue.get(queue))
                    if (binding := self.bindings[child]) in visible
                }
            )
            if found:
                self.queue_bindings[queue] = found
            else:
                self.queue_bindings.pop(queue, None)
        self.stale_queues.clear()

    def _is_visible(self, binding: Binding) -> bool:
        return binding.queue in self.queues and binding.exchange in self.exchanges

    def _show_children(self, children: str | set[str] | None, delta: int) -> None:
        for child in _members(children):
            binding = self.bindings[child]
            if self._is_visible(binding):
                self._show(binding, delta)

    def add(self, child: str, entity: Entity) -> None:
        if isinstance(entity, Binding):
            self.bindings[child] = entity
            _add(self.by_queue, entity.queue, child)
            _add(self.by_exchange, entity.exchange, child)
            if self._is_visible(entity):
                self._show(entity, 1)
        elif isinstance(entity, Queue):
            self.queues[entity.name] = entity
            self.queues_changed = True
            self._show_children(self.by_queue.get(entity.name), 1)
        elif isinstance(entity, Exchange):
            self.exchanges[entity.name] = entity
            self.exchanges_changed = True
            self._show_children(self.by_exchange.get(entity.name), 1)
            self._show_edges(entity.name, 1)
        elif isinstance(entity, ExchangeBinding):
            self.edges[child] = entity
            for end in {entity.source, entity.destination}:
                self.edges_by_exchange.setdefault(end, set()).add(child)
            if self._edge_visible(entity):
                self._show_edge(entity, 1)
        elif isinstance(entity, TopicKey):
            self.keys.setdefault(entity.exchange, set()).add(entity.routing_key)
            self.stale_keys.add(entity.exchange)
        else:
            self._queue_state(entity, 1, child)

    def _queue_state(
        self, entity: OwnerKey | ConsumerKey | DrainKey, delta: int, child: str
    ) -> None:
        self.state_changed = True
        if isinstance(entity, OwnerKey):
            if delta > 0:
                self.owned.add(entity.queue)
            else:
                self.owned.discard(entity.queue)
        elif isinstance(entity, ConsumerKey):
            if entity.place is not None and not self._place(
                entity.queue, child, entity.place, delta
            ):
                return  # one consumer's record replaced by another: the count stays
            count = self.consumers.get(entity.queue, 0) + delta
            if count > 0:
                self.consumers[entity.queue] = count
            else:
                self.consumers.pop(entity.queue, None)
        elif delta > 0:
            self.drains[(entity.queue, entity.topic)] = entity.record
        else:
            self.drains.pop((entity.queue, entity.topic), None)

    def remove(self, child: str, entity: Entity) -> None:
        if isinstance(entity, Binding):
            if self._is_visible(entity):
                self._show(entity, -1)
            del self.bindings[child]
            _remove(self.by_queue, entity.queue, child)
            _remove(self.by_exchange, entity.exchange, child)
        elif isinstance(entity, Queue):
            self._show_children(self.by_queue.get(entity.name), -1)
            del self.queues[entity.name]
            self.queues_changed = True
        elif isinstance(entity, Exchange):
            self._show_children(self.by_exchange.get(entity.name), -1)
            self._show_edges(entity.name, -1)
            del self.exchanges[entity.name]
            self.exchanges_changed = True
        elif isinstance(entity, ExchangeBinding):
            if self._edge_visible(entity):
                self._show_edge(entity, -1)
            del self.edges[child]
            for end in {entity.source, entity.destination}:
                _discard(self.edges_by_exchange, end, child)
        elif isinstance(entity, TopicKey):
            keys = self.keys[entity.exchange]
            keys.discard(entity.routing_key)
            if not keys:
                del self.keys[entity.exchange]
            self.stale_keys.add(entity.exchange)
        else:
            self._queue_state(entity, -1, child)

    def _place(self, queue: str, child: str, place: LinePlace, delta: int) -> bool:
        """Record ``child`` entering (``delta`` 1) or leaving (-1) ``queue``'s line; False when
        the consumer's count does not change. A consumer's record is replaced when it becomes
        active or steps down, the new one created before the old one is deleted (lines.py):
        the new one takes the consumer's place, and the old one's deletion, coming after, is
        ignored. So a view never shows the consumer missing, nor twice."""
        places = self.places.setdefault(queue, {})
        held = places.get(place.consumer)
        if delta > 0:
            places[place.consumer] = (child, place)
            counted = held is None
        else:
            counted = held is not None and held[0] == child
            if counted:
                del places[place.consumer]
        if not places:
            del self.places[queue]
        self.stale_lines.add(queue)
        return counted

    def _frozen_lines(self) -> None:
        for queue in self.stale_lines:
            places = self.places.get(queue)
            if places:
                self.lines[queue] = _in_line(place for _, place in places.values())
            else:
                self.lines.pop(queue, None)
        self.stale_lines.clear()

    def view(self, version: int) -> VhostView:
        last = self.last
        if self.stale_queues:
            self._refresh_queue_bindings()
        topic_keys = None if last is None or self.stale_keys else last.topic_keys
        lines = None if last is None or self.stale_lines else last.lines
        self._frozen_lines()
        for exchange in self.stale_keys:
            keys = self.keys.get(exchange)
            if keys:
                self.frozen_keys[exchange] = frozenset(keys)
            else:
                self.frozen_keys.pop(exchange, None)
        self.stale_keys.clear()
        view = self.last = VhostView(
            version=version,
            exchanges=(
                MappingProxyType(dict(self.exchanges))
                if last is None or self.exchanges_changed
                else last.exchanges
            ),
            queues=(self.queues.frozen() if last is None or self.queues_changed else last.queues),
            bindings=(
                self.visible.frozen_keys()
                if last is None or self.bindings_changed
                else last.bindings
            ),
            queue_bindings=(
                self.queue_bindings.frozen()
                if last is None or self.bindings_changed
                else last.queue_bindings
            ),
            exchange_bindings=(
                frozenset(self.visible_edges)
                if last is None or self.edges_changed
                else last.exchange_bindings
            ),
            topic_keys=(
                MappingProxyType(dict(self.frozen_keys)) if topic_keys is None else topic_keys
            ),
            owned=frozenset(self.owned) if last is None or self.state_changed else last.owned,
            consumers=(
                MappingProxyType(dict(self.consumers))
                if last is None or self.state_changed
                else last.consumers
            ),
            drains=(
                MappingProxyType(dict(self.drains))
                if last is None or self.state_changed
                else last.drains
            ),
            lines=MappingProxyType(dict(self.lines)) if lines is None else lines,
        )
        self.exchanges_changed = self.queues_changed = self.bindings_changed = False
        self.edges_changed = self.state_changed = False
        return view


def _add(index: dict[str, str | set[str]], key: str, child: str) -> None:
    children = index.get(key)
    if children is None:
        index[key] = child
    elif isinstance(children, str):
        index[key] = {children, child}
    else:
        children.add(child)


def _members(children: str | set[str] | None) -> Iterable[str]:
    if children is None:
        return ()
    if isinstance(children, str):
        return (children,)
    return children


def _remove(index: dict[str, str | set[str]], key: str, child: str) -> None:
    children = index[key]
    if isinstance(children, str):
        if children == child:
            del index[key]
        return
    children.discard(child)
    if len(children) == 1:
        index[key] = children.pop()
    elif not children:
        del index[key]


def _discard(index: dict[str, set[str]], key: str, child: str) -> None:
    children = index[key]
    children.discard(child)
    if not children:
        del index[key]


class NamespaceMirror:
    """The znodes of one namespace as this replica knows them, and the view built from them."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.version = 0
        self._folders: dict[Folder, dict[str, _Bucket]] = {folder: {} for folder in Folder}
        self._index = _Index()
        # True until the first snapshot: changes go to the buckets only, and the index is
        # built from them in one go (_Index.load) when a view is first asked for, at the end
        # of the first load. Indexing a million queues and bindings one change at a time
        # costs several times more.
        self._deferred = True
        self._snapshot: VhostView | None = None

    # ------------------------------------------------------------------ reading

    def snapshot(self) -> VhostView:
        """The view at the current version (built once per version)."""
        if self._deferred:
            self._deferred = False
            self._index.load(self._folders)
        snapshot = self._snapshot
        if snapshot is None or snapshot.version != self.version:
            snapshot = self._snapshot = self._index.view(self.version)
        return snapshot

    def get(self, folder: Folder, child: str) -> Entity | None:
        bucket = self._folders[folder].get(bucket_for(folder, child))
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
            for child in list(known[gone].entities):
                self._drop(known[gone], child)
            del known[gone]

    def apply_bucket_listing(
        self, folder: Folder, bucket_name: str, children: Sequence[str], cversion: int
    ) -> list[str]:
        """A bucket's children and cversion, from one listing; returns the children whose data
        must be read (new ones, and all of them when a replacement may have been missed)."""
        bucket = self._bucket(folder, bucket_name)
        listed = set(children)
        accounted = len(listed - bucket.names) + len(bucket.names - listed) + bucket.own_changes
        suspicious = bucket.cversion is None or cversion != bucket.cversion + accounted
        for child in [child for child in bucket.entities if child not in listed]:
            self._drop(bucket, child)
        bucket.names = listed
        bucket.cversion = cversion
        bucket.own_changes = 0
        entities = bucket.entities
        if folder in _READ_ALWAYS:  # nothing in the name: read each new child
            return [c for c in children if suspicious or c not in entities]
        to_read: list[str] = []
        for child in children:
            if not suspicious and child in entities:
                continue
            if self._enter_by_name(folder, bucket, child):
                to_read.append(child)
        return to_read

    def _enter_by_name(self, folder: Folder, bucket: _Bucket, child: str) -> bool:
        """Put ``child`` in the view if its name says everything; True if its data must be
        read (False too for a name we do not write, which is ignored)."""
        try:
            entity = name_only_entity(folder, child)
        except ValueError:
            log.warning("metadata: ignoring znode %r in %s: not a name we write", child, folder)
            return False
        if entity is None:
            return True
        self._put(bucket, child, entity)
        return False

    # ------------------------------------------------------------------ persistent watch events

    def event_created(self, folder: Folder, bucket_name: str, child: str) -> None:
        """An event: ``child`` was created. Its name is known from now on (a later read of
        it is applied, and the next listing accounts for it); the entity itself comes with
        ``apply_created``, once the events that came with this one have been seen."""
        bucket = self._bucket(folder, bucket_name)
        bucket.names.add(child)
        bucket.own_changes += 1

    def event_deleted(self, folder: Folder, bucket_name: str, child: str) -> None:
        """An event: ``child`` was deleted. It leaves the view with ``apply_deleted``, once
        the events that came with this one have been seen: deleted and created again in one
        transaction (both events seen), it is replaced rather than missing."""
        bucket = self._folders[folder].get(bucket_name)
        if bucket is not None and child in bucket.names:
            bucket.names.discard(child)
            bucket.own_changes += 1

    def apply_deleted(self, folder: Folder, children: Iterable[str]) -> None:
        """Children deleted (``event_deleted``) and not created again since: out of the
        view."""
        buckets = self._folders[folder]
        for child in children:
            bucket = buckets.get(bucket_for(folder, child))
            if bucket is not None and child not in bucket.names:
                self._drop(bucket, child)

    def apply_created(self, folder: Folder, children: Iterable[str]) -> set[str]:
        """Children created (``event_created``) and still there: those whose name says
        everything enter the view; returns those whose data must be read."""
        to_read: set[str] = set()
        buckets = self._folders[folder]
        for child in children:
            bucket = buckets.get(bucket_for(folder, child))
            if bucket is None or child not in bucket.names:
                continue
            if self._enter_by_name(folder, bucket, child):
                to_read.add(child)
        return to_read

    def present(self, folder: Folder, children: Iterable[str]) -> set[str]:
        """Those of ``children`` that exist as far as the events and listings tell."""
        buckets = self._folders[folder]
        found: set[str] = set()
        for child in children:
            bucket = buckets.get(bucket_for(folder, child))
            if bucket is not None and child in bucket.names:
                found.add(child)
        return found

    def apply_missing_bucket(self, folder: Folder, bucket_name: str) -> None:
        """Listing the bucket found no such node."""
        bucket = self._folders[folder].get(bucket_name)
        if bucket is not None:
            for child in list(bucket.entities):
                self._drop(bucket, child)
            del self._folders[folder][bucket_name]

    def apply_data(
        self, folder: Folder, child: str, data: bytes | None, bucket_name: str | None = None
    ) -> bool:
        """A read of a child's data (None: the node was gone when read). True when it added
        or replaced an entity in the view (what the watch lag counts: something new seen).
        ``bucket_name``: the child's bucket, when the caller knows it."""
        if bucket_name is None:
            bucket_name = bucket_for(folder, child)
        bucket = self._folders[folder].get(bucket_name)
        if bucket is None:
            return False
        if data is None:
            # Deleted after the listing that named it; the next listing confirms it.
            self._drop(bucket, child)
            return False
        if child not in bucket.names:
            return False  # a newer listing no longer has it
        try:
            entity = decode_entity(folder, child, data)
        except (ValueError, KeyError, TypeError) as error:
            log.warning("metadata: ignoring znode %r in %s: %s", child, folder, error)
            return False
        return self._put(bucket, child, entity)

    # ------------------------------------------------------------------ own writes

    def own_created(self, folder: Folder, child: str, entity: Entity) -> None:
        bucket = self._bucket(folder, bucket_for(folder, child))
        if child not in bucket.names:  # else an event (held back or not) counted it
            bucket.names.add(child)
            bucket.own_changes += 1
        self._put(bucket, child, entity)

    def own_deleted(self, folder: Folder, child: str) -> None:
        bucket = self._bucket(folder, bucket_for(folder, child))
        if child in bucket.names:  # else its deletion event counted it
            bucket.names.discard(child)
            bucket.own_changes += 1
        self._drop(bucket, child)

    def own_touched(self, folder: Folder, child: str, changes: int) -> None:
        """Our own write created and deleted ``changes`` children in ``child``'s bucket (a
        sentinel that makes other replicas look at the bucket again): account for them."""
        self._bucket(folder, bucket_for(folder, child)).own_changes += changes

    def learned(self, folder: Folder, child: str, entity: Entity) -> None:
        """A read outside the listings found ``entity`` (the winner of a create race): show it
        now. It is not added to the bucket's names, so the next listing still accounts for
        its creation."""
        self._put(self._bucket(folder, bucket_for(folder, child)), child, entity)

    def forget(self, folder: Folder, child: str) -> None:
        """A write found ``child`` absent from the store: stop showing it."""
        bucket = self._folders[folder].get(bucket_for(folder, child))
        if bucket is not None:
            self._drop(bucket, child)

    # ------------------------------------------------------------------ internals

    def _bucket(self, folder: Folder, name: str) -> _Bucket:
        buckets = self._folders[folder]
        bucket = buckets.get(name)
        if bucket is None:
            bucket = buckets[name] = _Bucket()
        return bucket

    def _put(self, bucket: _Bucket, child: str, entity: Entity) -> bool:
        """The one place that adds or replaces an entity (and keeps the index); False when
        the view already had it."""
        known = bucket.entities.get(child)
        if known == entity:
            return False
        bucket.entities[child] = entity
        if not self._deferred:
            if known is not None:
                self._index.remove(child, known)
            self._index.add(child, entity)
        self.version += 1
        return True

    def _drop(self, bucket: _Bucket, child: str) -> None:
        """The one place that removes an entity."""
        known = bucket.entities.pop(child, None)
        if known is not None:
            if not self._deferred:
                self._index.remove(child, known)
            self._changed()

    def _changed(self) -> None:
        self.version += 1
