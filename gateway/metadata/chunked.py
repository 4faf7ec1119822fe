"""Maps and sets whose snapshots cost a few microseconds whatever their size.

A replica's view is an immutable snapshot (store.VhostView), taken after every change it
applies. Copying a dict of a million queues for each one takes 50-250 ms on the development
machine: at a thousand changes a second, impossible. Here the live map is split into CHUNKS
dicts by hash; a snapshot is a tuple of references to them, and the live map copies a chunk
(1/CHUNKS of the entries) the first time it changes it after a snapshot (copy on write). A
lookup costs one hash (cached by ``str``) and two indexings more than a dict's.

A snapshot also knows which keys changed since an earlier snapshot of the same map (a bounded
log of the keys each change named): ``Picked`` looks only at those, where comparing chunks
would look at every entry of each changed chunk (at a thousand changes a second, nearly
every chunk between two rounds of a periodic job, so the whole map again).

A map can also start from a plain dict (``ChunkedDict(base)``: the end of a first load),
which is then never changed: every snapshot shares it, and the chunks hold only what changed
since (``_GONE`` where an entry of the base was deleted). Spreading a million entries over
the chunks one by one cost seconds of a million-queue load; a base costs nothing, and a
lookup that the chunks do not answer costs one dict lookup more.
"""

from __future__ import annotations

from collections.abc import (
    Callable,
    ItemsView,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
    Set,
    ValuesView,
)
from itertools import compress
from operator import is_not
from typing import Any, Final, Generic, TypeVar

__all__ = ["CHUNKS", "ChunkedDict", "FrozenChunkedMap", "FrozenChunkedSet", "Picked"]

K = TypeVar("K")
V = TypeVar("V")

CHUNKS: Final = 1024
_MASK: Final = CHUNKS - 1
# Keys the change log holds before it starts a new list (snapshots keep the old one): at a
# thousand changes a second, half a minute, many rounds of any periodic job; ~0.3 MB.
CHANGE_LOG_LIMIT: Final = 1 << 15


class _ChangeLog:
    """Where a snapshot stands in its map's change log: the list of changed keys (shared with
    the map and its other snapshots until the map starts a new one; only ever appended to),
    the sequence number of its first key, and how many of its keys the snapshot follows."""

    __slots__ = ("end", "keys", "start")

    def __init__(self, keys: list[Any], start: int, end: int) -> None:
        self.keys, self.start, self.end = keys, start, end


class _Gone:
    def __repr__(self) -> str:
        return "_GONE"


# An entry of the base deleted (in a chunk); _MISS: not in the chunk.
_GONE: Final = _Gone()
_MISS: Final = object()


class _Reads(Generic[K, V]):
    """What a live map and its snapshots read alike: membership, iteration and size, over
    a base and chunks."""

    __slots__ = ()
    _base: dict[K, V]
    _chunks: Sequence[dict[K, Any]]
    _len: int

    def __contains__(self, key: object) -> bool:
        found = self._chunks[hash(key) & _MASK].get(key, _MISS)  # type: ignore[arg-type]
        if found is _MISS:
            return key in self._base
        return found is not _GONE

    def __iter__(self) -> Iterator[K]:
        return _iterate(self._base, self._chunks)

    def __len__(self) -> int:
        return self._len


class _Lookups(_Reads[K, V]):
    """Lookups by key, for a live map and its Mapping snapshots (not its key sets)."""

    __slots__ = ()

    def __getitem__(self, key: K) -> V:
        return _lookup(self._base, self._chunks, key)

    def get(self, key: K, default: Any = None) -> Any:
        try:
            return _lookup(self._base, self._chunks, key)
        except KeyError:
            return default


class _Frozen(_Reads[K, V]):
    """The base and chunks of a snapshot: membership, iteration, size."""

    __slots__ = ("_base", "_changes", "_chunks", "_len")
    _chunks: tuple[dict[K, Any], ...]

    def __init__(
        self,
        base: dict[K, V],
        chunks: tuple[dict[K, Any], ...],
        length: int,
        changes: _ChangeLog | None = None,
    ) -> None:
        self._base = base
        self._chunks = chunks
        self._len = length
        self._changes = changes

    def changed_since(self, earlier: object) -> list[K] | None:
        """The keys set or deleted between ``earlier`` (a snapshot of the same map) and this
        one, in order, repeats included; None when the log does not tell (another map,
        a later snapshot, or the log started anew in between)."""
        mine = self._changes
        theirs = earlier._changes if isinstance(earlier, _Frozen) else None
        if mine is None or theirs is None or theirs.keys is not mine.keys:
            return None
        if theirs.end > mine.end:
            return None
        return mine.keys[theirs.end - mine.start : mine.end - mine.start]

    @property
    def chunks(self) -> tuple[Mapping[K, Any], ...]:
        """The chunks (never changed once in a snapshot). A snapshot shares with the next one,
        taken of the same live map, every chunk that did not change in between, as the same
        object: comparing two snapshots' chunks by identity finds what changed, in
        ``CHUNKS`` comparisons whatever the size. Entries of the base deleted are ``_GONE``
        in them."""
        return self._chunks

    @property
    def base(self) -> Mapping[K, V]:
        """The base (never changed): the entries the chunks do not hold are its."""
        return self._base


def _iterate(base: dict[K, Any], chunks: Sequence[dict[K, Any]]) -> Iterator[K]:
    if any(chunks):
        for key in base:
            if key not in chunks[hash(key) & _MASK]:
                yield key
        for chunk in chunks:
            for key, value in chunk.items():
                if value is not _GONE:
                    yield key
    else:
        yield from base


def _lookup(base: dict[K, V], chunks: Sequence[dict[K, Any]], key: K) -> V:
    found = chunks[hash(key) & _MASK].get(key, _MISS)
    if found is _MISS:
        return base[key]
    if found is _GONE:
        raise KeyError(key)
    return found  # type: ignore[no-any-return]


def _iterate_items(base: dict[K, V], chunks: Sequence[dict[K, Any]]) -> Iterator[tuple[K, V]]:
    if any(chunks):
        for key, value in base.items():
            if key not in chunks[hash(key) & _MASK]:
                yield key, value
        for chunk in chunks:
            for key, value in chunk.items():
                if value is not _GONE:
                    yield key, value
    else:
        yield from base.items()


class _Items(ItemsView[K, V]):
    """Items without a lookup per key (Mapping's own looks every key up again: a walk over
    a million queues' values, as the leader's rounds make, spent a third of it there)."""

    _mapping: FrozenChunkedMap[K, V]

    def __iter__(self) -> Iterator[tuple[K, V]]:
        return _iterate_items(self._mapping._base, self._mapping._chunks)


class _Values(ValuesView[V]):
    _mapping: FrozenChunkedMap[Any, V]

    def __iter__(self) -> Iterator[V]:
        for _key, value in _iterate_items(self._mapping._base, self._mapping._chunks):
            yield value


class FrozenChunkedMap(_Frozen[K, V], _Lookups[K, V], Mapping[K, V]):
    """A snapshot of a ChunkedDict: a read-only Mapping."""

    __slots__ = ()

    def items(self) -> ItemsView[K, V]:
        return _Items(self)

    def values(self) -> ValuesView[V]:
        return _Values(self)

    def __repr__(self) -> str:
        return f"FrozenChunkedMap({len(self)} entries)"


class FrozenChunkedSet(_Frozen[K, Any], Set[K]):
    """A snapshot of a ChunkedDict's keys: a read-only Set (set operations give frozensets)."""

    __slots__ = ()

    @classmethod
    def _from_iterable(cls, iterable: Iterable[Any]) -> frozenset[Any]:
        return frozenset(iterable)

    def __hash__(self) -> int:
        return self._hash()

    def __repr__(self) -> str:
        return f"FrozenChunkedSet({len(self)} members)"


class ChunkedDict(_Lookups[K, V]):
    """The live map: dict operations, and ``frozen()`` / ``frozen_keys()`` snapshots.
    ``base``: the initial entries (the map takes the dict, and never changes it)."""

    __slots__ = ("_base", "_chunks", "_len", "_log", "_log_start", "_shared")

    def __init__(self, base: dict[K, V] | None = None) -> None:
        self._base: dict[K, V] = {} if base is None else base
        self._chunks: list[dict[K, Any]] = [{} for _ in range(CHUNKS)]
        # Chunks a snapshot holds: copied before their next change.
        self._shared = bytearray(CHUNKS)
        self._len = len(self._base)
        # The keys of the changes since the sequence number ``_log_start``.
        self._log: list[K] = []
        self._log_start = 0

    def _writable(self, key: K) -> dict[K, Any]:
        """The chunk of ``key``, about to change: copied if a snapshot holds it; the key
        logged."""
        if len(self._log) >= CHANGE_LOG_LIMIT:
            # A new list: snapshots hold the old one, which must not change under them.
            self._log_start += len(self._log)
            self._log = []
        self._log.append(key)
        index = hash(key) & _MASK
        if self._shared[index]:
            self._chunks[index] = dict(self._chunks[index])
            self._shared[index] = 0
        return self._chunks[index]

    def __setitem__(self, key: K, value: V) -> None:
        chunk = self._writable(key)
        found = chunk.get(key, _MISS)
        if found is _GONE or (found is _MISS and key not in self._base):
            self._len += 1
        chunk[key] = value

    def __delitem__(self, key: K) -> None:
        chunk = self._writable(key)
        found = chunk.get(key, _MISS)
        in_base = key in self._base
        if found is _GONE or (found is _MISS and not in_base):
            raise KeyError(key)
        if in_base:
            chunk[key] = _GONE
        else:
            del chunk[key]
        self._len -= 1

    def pop(self, key: K, default: Any = None) -> Any:
        if key not in self:
            return default
        value = self[key]
        del self[key]
        return value

    def _share(self) -> tuple[dict[K, Any], ...]:
        self._shared = bytearray(b"\x01" * CHUNKS)
        return tuple(self._chunks)

    def _position(self) -> _ChangeLog:
        return _ChangeLog(self._log, self._log_start, self._log_start + len(self._log))

    def frozen(self) -> FrozenChunkedMap[K, V]:
        return FrozenChunkedMap(self._base, self._share(), self._len, self._position())

    def frozen_keys(self) -> FrozenChunkedSet[K]:
        return FrozenChunkedSet(self._base, self._share(), self._len, self._position())


R = TypeVar("R")


class Picked(Generic[K, V, R]):
    """The entries of a map's successive snapshots that ``pick`` gives a value for (not
    None), kept up to date by looking only at what changed.

    Periodic jobs look for a few queues among all (streams, queues with a length limit, an
    expiry, a TTL, an owner): a look at every queue, each round, costs in proportion to the
    vhost (a second of a core per round at a million queues). Given snapshots of one
    ``ChunkedDict``, this looks again only at the keys changed since the previous snapshot
    (``changed_since``) or, where the change log does not tell, at the chunks not shared with
    it (``chunks``), and at the base once per base; any other mapping is looked at whole."""

    __slots__ = ("_all", "_base", "_base_picked", "_by_chunk", "_pick", "_snapshot")

    def __init__(self, pick: Callable[[V], R | None]) -> None:
        self._pick = pick
        self._snapshot: object = None
        self._base: object = None
        self._base_picked: dict[K, R] = {}
        self._by_chunk: dict[int, dict[K, R]] = {}
        self._all: dict[K, R] = {}

    def __call__(self, snapshot: Mapping[K, V]) -> Mapping[K, R]:
        """What ``pick`` gives for the entries of ``snapshot``, by key (do not change it)."""
        if snapshot is self._snapshot:
            return self._all
        pick = self._pick
        previous = self._snapshot
        self._snapshot = snapshot
        if not isinstance(snapshot, _Frozen):
            self._by_chunk.clear()
            self._base = None
            self._all = {k: r for k, v in snapshot.items() if (r := pick(v)) is not None}
            return self._all
        base = snapshot.base
        keys = snapshot.changed_since(previous) if base is self._base else None
        if keys is not None:
            changed = self._look_at_keys(snapshot.chunks, keys)
        else:
            changed = self._look_at_chunks(snapshot, previous)
        if changed:
            # The base's picks (few) unless a chunk holds their key (changed or deleted).
            chunks = snapshot.chunks
            picked = {
                k: r for k, r in self._base_picked.items() if k not in chunks[hash(k) & _MASK]
            }
            for index in sorted(self._by_chunk):
                picked.update(self._by_chunk[index])
            self._all = picked
        return self._all

    def _look_at_keys(self, chunks: tuple[Mapping[K, Any], ...], keys: list[K]) -> bool:
        """Picks again the entries of ``keys`` alone (each changed key is in its chunk now,
        as a value or _GONE, unless it was deleted and never in the base)."""
        pick = self._pick
        for key in set(keys):
            index = hash(key) & _MASK
            value = chunks[index].get(key, _GONE)
            result = None if value is _GONE else pick(value)
            found = self._by_chunk.get(index)
            if result is not None:
                if found is None:
                    found = self._by_chunk[index] = {}
                found[key] = result
            elif found is not None and found.pop(key, None) is not None and not found:
                del self._by_chunk[index]
        return bool(keys)

    def _look_at_chunks(self, snapshot: _Frozen[K, V], previous: object) -> bool:
        """Picks again every entry of the chunks not shared with ``previous`` (and of the base
        if it is another)."""
        pick = self._pick
        changed = False
        base = snapshot.base
        if base is not self._base:
            self._base = base
            self._base_picked = {k: r for k, v in base.items() if (r := pick(v)) is not None}
            changed = True
        chunks = snapshot.chunks
        before: tuple[object, ...] = (None,) * len(chunks)
        if isinstance(previous, _Frozen) and len(previous.chunks) == len(chunks):
            before = previous.chunks
        else:
            self._by_chunk.clear()
        # The chunks replaced since the last snapshot, compared in C (a Python loop over
        # the 1,024 of them was ~2 % of a replica's CPU during declare+bind).
        for index in compress(range(len(chunks)), map(is_not, chunks, before)):
            chunk = chunks[index]
            changed = True
            found = {
                k: r for k, v in chunk.items() if v is not _GONE and (r := pick(v)) is not None
            }
            if found:
                self._by_chunk[index] = found
            else:
                self._by_chunk.pop(index, None)
        return changed
