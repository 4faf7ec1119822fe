"""Maps and sets whose snapshots cost a few microseconds whatever their size.

A replica's view is an immutable snapshot (store.VhostView), taken after every change it
applies. Copying a dict of a million queues for each one takes 50-250 ms on the development
machine: at a thousand changes a second, impossible. Here the live map is split into CHUNKS
dicts by hash; a snapshot is a tuple of references to them, and the live map copies a chunk
(1/CHUNKS of the entries) the first time it changes it after a snapshot (copy on write). A
lookup costs one hash (cached by ``str``) and two indexings more than a dict's.

A map can also start from a plain dict (``ChunkedDict(base)``: the end of a first load),
which is then never changed: every snapshot shares it, and the chunks hold only what changed
since (``_GONE`` where an entry of the base was deleted). Spreading a million entries over
the chunks one by one cost seconds of a million-queue load; a base costs nothing, and a
lookup that the chunks do not answer costs one dict lookup more.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence, Set, ValuesView
from typing import Any, Final, Generic, TypeVar

__all__ = ["CHUNKS", "ChunkedDict", "FrozenChunkedMap", "FrozenChunkedSet"]

K = TypeVar("K")
V = TypeVar("V")

CHUNKS: Final = 1024
_MASK: Final = CHUNKS - 1


class _Gone:
    def __repr__(self) -> str:
        return "_GONE"


# An entry of the base deleted (in a chunk); _MISS: not in the chunk.
_GONE: Final = _Gone()
_MISS: Final = object()


class _Frozen(Generic[K, V]):
    """The base and chunks of a snapshot: membership, iteration, size."""

    __slots__ = ("_base", "_chunks", "_len")

    def __init__(self, base: dict[K, V], chunks: tuple[dict[K, Any], ...], length: int) -> None:
        self._base = base
        self._chunks = chunks
        self._len = length

    def __contains__(self, key: object) -> bool:
        found = self._chunks[hash(key) & _MASK].get(key, _MISS)  # type: ignore[arg-type]
        if found is _MISS:
            return key in self._base
        return found is not _GONE

    def __iter__(self) -> Iterator[K]:
        return _iterate(self._base, self._chunks)

    def __len__(self) -> int:
        return self._len


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


class FrozenChunkedMap(_Frozen[K, V], Mapping[K, V]):
    """A snapshot of a ChunkedDict: a read-only Mapping."""

    __slots__ = ()

    def items(self) -> ItemsView[K, V]:
        return _Items(self)

    def values(self) -> ValuesView[V]:
        return _Values(self)

    def __getitem__(self, key: K) -> V:
        return _lookup(self._base, self._chunks, key)

    def get(self, key: K, default: Any = None) -> Any:
        try:
            return _lookup(self._base, self._chunks, key)
        except KeyError:
            return default

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


class ChunkedDict(Generic[K, V]):
    """The live map: dict operations, and ``frozen()`` / ``frozen_keys()`` snapshots.
    ``base``: the initial entries (the map takes the dict, and never changes it)."""

    __slots__ = ("_base", "_chunks", "_len", "_shared")

    def __init__(self, base: dict[K, V] | None = None) -> None:
        self._base: dict[K, V] = {} if base is None else base
        self._chunks: list[dict[K, Any]] = [{} for _ in range(CHUNKS)]
        # Chunks a snapshot holds: copied before their next change.
        self._shared = bytearray(CHUNKS)
        self._len = len(self._base)

    def __len__(self) -> int:
        return self._len

    def __contains__(self, key: object) -> bool:
        found = self._chunks[hash(key) & _MASK].get(key, _MISS)  # type: ignore[arg-type]
        if found is _MISS:
            return key in self._base
        return found is not _GONE

    def __getitem__(self, key: K) -> V:
        return _lookup(self._base, self._chunks, key)

    def get(self, key: K, default: Any = None) -> Any:
        try:
            return _lookup(self._base, self._chunks, key)
        except KeyError:
            return default

    def __iter__(self) -> Iterator[K]:
        return _iterate(self._base, self._chunks)

    def _writable(self, key: K) -> dict[K, Any]:
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

    def frozen(self) -> FrozenChunkedMap[K, V]:
        return FrozenChunkedMap(self._base, self._share(), self._len)

    def frozen_keys(self) -> FrozenChunkedSet[K]:
        return FrozenChunkedSet(self._base, self._share(), self._len)
