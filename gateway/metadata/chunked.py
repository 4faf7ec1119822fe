"""Maps and sets whose snapshots cost a few microseconds whatever their size.

A replica's view is an immutable snapshot (store.VhostView), taken after every change it
applies. Copying a dict of a million queues for each one takes 50-250 ms on the development
machine: at a thousand changes a second, impossible. Here the live map is split into CHUNKS
dicts by hash; a snapshot is a tuple of references to them, and the live map copies a chunk
(1/CHUNKS of the entries) the first time it changes it after a snapshot (copy on write). A
lookup costs one hash (cached by ``str``) and two indexings more than a dict's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from typing import Any, Final, Generic, TypeVar

__all__ = ["CHUNKS", "ChunkedDict", "FrozenChunkedMap", "FrozenChunkedSet", "Picked"]

K = TypeVar("K")
V = TypeVar("V")

CHUNKS: Final = 1024
_MASK: Final = CHUNKS - 1


class _Frozen(Generic[K, V]):
    """The chunks of a snapshot: membership, iteration, size."""

    __slots__ = ("_chunks", "_len")

    def __init__(self, chunks: tuple[dict[K, V], ...], length: int) -> None:
        self._chunks = chunks
        self._len = length

    def __contains__(self, key: object) -> bool:
        return key in self._chunks[hash(key) & _MASK]

    def __iter__(self) -> Iterator[K]:
        for chunk in self._chunks:
            yield from chunk

    def __len__(self) -> int:
        return self._len

    @property
    def chunks(self) -> tuple[Mapping[K, V], ...]:
        """The chunks (never changed once in a snapshot). A snapshot shares with the next one,
        taken of the same live map, every chunk that did not change in between, as the same
        object: comparing two snapshots' chunks by identity finds what changed, in
        ``CHUNKS`` comparisons whatever the size."""
        return self._chunks


class FrozenChunkedMap(_Frozen[K, V], Mapping[K, V]):
    """A snapshot of a ChunkedDict: a read-only Mapping."""

    __slots__ = ()

    def __getitem__(self, key: K) -> V:
        return self._chunks[hash(key) & _MASK][key]

    def get(self, key: K, default: Any = None) -> Any:
        return self._chunks[hash(key) & _MASK].get(key, default)

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
    """The live map: dict operations, and ``frozen()`` / ``frozen_keys()`` snapshots."""

    __slots__ = ("_chunks", "_len", "_shared")

    def __init__(self) -> None:
        self._chunks: list[dict[K, V]] = [{} for _ in range(CHUNKS)]
        # Chunks a snapshot holds: copied before their next change.
        self._shared = bytearray(CHUNKS)
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __contains__(self, key: object) -> bool:
        return key in self._chunks[hash(key) & _MASK]

    def __getitem__(self, key: K) -> V:
        return self._chunks[hash(key) & _MASK][key]

    def get(self, key: K, default: Any = None) -> Any:
        return self._chunks[hash(key) & _MASK].get(key, default)

    def __iter__(self) -> Iterator[K]:
        for chunk in self._chunks:
            yield from chunk

    def _writable(self, key: K) -> dict[K, V]:
        index = hash(key) & _MASK
        if self._shared[index]:
            self._chunks[index] = dict(self._chunks[index])
            self._shared[index] = 0
        return self._chunks[index]

    def __setitem__(self, key: K, value: V) -> None:
        chunk = self._writable(key)
        if key not in chunk:
            self._len += 1
        chunk[key] = value

    def __delitem__(self, key: K) -> None:
        chunk = self._writable(key)
        del chunk[key]
        self._len -= 1

    def pop(self, key: K, default: Any = None) -> Any:
        if key not in self:
            return default
        chunk = self._writable(key)
        self._len -= 1
        return chunk.pop(key)

    def _share(self) -> tuple[dict[K, V], ...]:
        self._shared = bytearray(b"\x01" * CHUNKS)
        return tuple(self._chunks)

    def frozen(self) -> FrozenChunkedMap[K, V]:
        return FrozenChunkedMap(self._share(), self._len)

    def frozen_keys(self) -> FrozenChunkedSet[K]:
        return FrozenChunkedSet(self._share(), self._len)


R = TypeVar("R")


class Picked(Generic[K, V, R]):
    """The entries of a map's successive snapshots that ``pick`` gives a value for (not
    None), kept up to date by looking only at what changed.

    Periodic jobs look for a few queues among all (streams, queues with a length limit, an
    expiry, a TTL, an owner): a look at every queue, each round, costs in proportion to the
    vhost (a second of a core per round at a million queues). Given snapshots of one
    ``ChunkedDict``, this looks again only at the chunks not shared with the previous
    snapshot (``chunks``); any other mapping is looked at whole."""

    __slots__ = ("_all", "_by_chunk", "_pick", "_snapshot")

    def __init__(self, pick: Callable[[V], R | None]) -> None:
        self._pick = pick
        self._snapshot: object = None
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
            self._all = {k: r for k, v in snapshot.items() if (r := pick(v)) is not None}
            return self._all
        chunks = snapshot.chunks
        before: tuple[object, ...] = (None,) * len(chunks)
        if isinstance(previous, _Frozen) and len(previous.chunks) == len(chunks):
            before = previous.chunks
        else:
            self._by_chunk.clear()
        changed = False
        for index, (chunk, old) in enumerate(zip(chunks, before, strict=True)):
            if chunk is old:
                continue
            changed = True
            found = {k: r for k, v in chunk.items() if (r := pick(v)) is not None}
            if found:
                self._by_chunk[index] = found
            else:
                self._by_chunk.pop(index, None)
        if changed:
            self._all = {k: r for i in sorted(self._by_chunk) for k, r in self._by_chunk[i].items()}
        return self._all
