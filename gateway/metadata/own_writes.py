"""The paths this session's transactions in flight create or change, and the watch events
held back for them.

A persistent watch (persistent_watch.py) reports this replica's own writes too, and ZooKeeper
sends the event *before* the answer to the write. An event for a new queue would make the
replica read the node it has just written, whose data it knows: the answer applies it to the
view anyway (calls.py). So an event for a path that one of our transactions in flight creates
or changes is held back here instead. When the transactions on that path are answered:

* all succeeded: the held events were ours (a create succeeds only on a path that did not
  exist, and the last change before our answer is ours), and the answers applied their
  results: the events are dropped;
* one failed (a create that met an existing node, a version that had moved, a lost
  connection): the events may have been another replica's, and are handed back to be applied
  as any event would be.

Deletions are never held: applying them at once is right whoever made them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["OwnWrites"]


class OwnWrites:
    """Per path: transactions in flight, the events held, whether one of them failed."""

    __slots__ = ("_failed", "_held", "_inflight")

    def __init__(self) -> None:
        self._inflight: dict[str, int] = {}
        self._held: dict[str, list[Callable[[], None]]] = {}
        self._failed: set[str] = set()

    def __len__(self) -> int:
        return len(self._inflight)

    def begin(self, paths: Iterable[str]) -> None:
        """A transaction creating or changing ``paths`` is being sent."""
        inflight = self._inflight
        for path in paths:
            inflight[path] = inflight.get(path, 0) + 1

    def end(self, paths: Iterable[str], *, failed: bool) -> None:
        """That transaction was answered; events held for a path no longer in flight are
        applied (``replay()``) if any of its transactions failed, dropped otherwise."""
        inflight = self._inflight
        for path in paths:
            count = inflight.get(path, 0) - 1
            if failed:
                self._failed.add(path)
            if count > 0:
                inflight[path] = count
                continue
            inflight.pop(path, None)
            held = self._held.pop(path, ())
            if path in self._failed:
                self._failed.discard(path)
                for replay in held:
                    replay()

    def hold(self, path: str, replay: Callable[[], None]) -> bool:
        """Hold an event for ``path`` if a transaction of ours on it is in flight (True);
        ``replay`` applies it, should that transaction fail."""
        if path not in self._inflight:
            return False
        self._held.setdefault(path, []).append(replay)
        return True

    def clear(self) -> None:
        """The connection went: answers may never come, and a resync lists everything."""
        self._inflight.clear()
        self._held.clear()
        self._failed.clear()
