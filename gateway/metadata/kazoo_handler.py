"""A kazoo handler for a trio application: cheap waits, and answers handed on without a hop.

kazoo's ``SequentialThreadingHandler`` costs the gateway most of its CPU per metadata write
(docs/fleet.md, "Fleet benchmark"), for two reasons this handler removes:

* **A new selector per wait.** Its ``select`` builds an ``EpollSelector`` (an epoll
  descriptor, a registration per socket, a close) for every wait of the connection thread, and
  that thread waits three times per answer (the header's length, the rest, the next request)
  and twice per request. Here a wait is one ``poll`` call on a poll object kept per thread and
  per set of descriptors (``poll`` has no kernel object to create or close, and no limit on
  descriptor numbers, which is why kazoo left ``select.select``).
* **Two thread hops per answer.** The connection thread puts every completion callback on a
  queue for the completion thread, which wakes up (a ``Condition`` each way) only to call our
  callback, which hands the answer to trio (``TrioToken.run_sync_soon``). A callback marked
  :func:`direct` runs on the connection thread itself, as it reads the answer: it only appends
  to trio's queue, which is thread-safe and never blocks. Answers are read one at a time and in
  order on that thread, so they still reach trio in the order ZooKeeper sent them. Watch
  callbacks marked the same way skip the watch thread.

Callbacks not marked (kazoo's own, e.g. inside ``create_async``) keep their threads.
"""

from __future__ import annotations

import functools
import logging
import math
import select
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler

__all__ = ["DirectAsyncResult", "TrioHandler", "direct"]

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

_DIRECT: Final = "_starlight_direct"
# Poll objects kept per thread (one per set of descriptors waited on: the connection thread
# uses two or three); past this, a thread's cache starts again (descriptors of closed
# connections are never waited on again).
_POLLERS_PER_THREAD: Final = 8
_READ: Final = select.POLLIN | select.POLLPRI
_WRITE: Final = select.POLLOUT


def direct(callback: F) -> F:
    """Mark ``callback`` to run on the thread that completes the result (or delivers the
    watch event) instead of on kazoo's worker threads: it must be quick, must not block and
    must not raise (it runs inside kazoo's connection loop; an exception is logged)."""
    setattr(callback, _DIRECT, True)
    return callback


def _is_direct(callback: Any) -> bool:
    return getattr(callback, _DIRECT, False) is True


def _run_direct(callback: Callable[..., Any], *args: Any) -> None:
    try:
        callback(*args)
    except Exception:
        log.exception("a ZooKeeper callback failed")


def _fileno(obj: Any) -> int:
    return obj if isinstance(obj, int) else int(obj.fileno())


class DirectAsyncResult(AsyncResult):  # type: ignore[misc]
    """kazoo's AsyncResult, but callbacks marked :func:`direct` run at once, on the thread
    that sets the result (kazoo's connection thread for an answer), in link order."""

    def _do_callbacks(self) -> None:
        handler = self._handler
        for callback in self._callbacks:
            if _is_direct(callback) or not handler.running:
                _run_direct(callback, self)
            else:
                handler.completion_queue.put(functools.partial(callback, self))


class TrioHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """``SequentialThreadingHandler`` with a poll-based ``select`` and direct callbacks."""

    name = "starlight_trio_handler"

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()

    def async_result(self) -> DirectAsyncResult:
        return DirectAsyncResult(self)

    def dispatch_callback(self, callback: Any) -> None:
        if _is_direct(callback.func):
            _run_direct(callback.func, *callback.args)
        else:
            super().dispatch_callback(callback)

    def select(
        self,
        rlist: Sequence[Any],
        wlist: Sequence[Any],
        xlist: Sequence[Any],
        timeout: float | None = None,
    ) -> tuple[list[Any], list[Any], list[Any]]:
        """``select.select``'s contract (what kazoo's connection calls), on ``poll``. An
        error or hang-up on a descriptor reports it ready, so the caller's read or write
        meets the error."""
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must be non-negative")
        masks: dict[int, int] = {}
        for obj in rlist:
            fd = _fileno(obj)
            masks[fd] = masks.get(fd, 0) | _READ
        for obj in wlist:
            fd = _fileno(obj)
            masks[fd] = masks.get(fd, 0) | _WRITE
        poller = self._poller(tuple(masks.items()))
        events = dict(poller.poll(None if timeout is None else math.ceil(timeout * 1000)))
        if not events:
            return [], [], []
        readable = [obj for obj in rlist if events.get(_fileno(obj), 0) & ~_WRITE]
        writable = [obj for obj in wlist if events.get(_fileno(obj), 0) & ~_READ]
        return readable, writable, []

    def _poller(self, key: tuple[tuple[int, int], ...]) -> Any:
        pollers: dict[tuple[tuple[int, int], ...], Any] | None = getattr(
            self._local, "pollers", None
        )
        if pollers is None:
            pollers = self._local.pollers = {}
        poller = pollers.get(key)
        if poller is None:
            if len(pollers) >= _POLLERS_PER_THREAD:
                pollers.clear()
            poller = pollers[key] = select.poll()
            for fd, mask in key:
                poller.register(fd, mask)
        return poller
