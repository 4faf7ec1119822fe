"""From pulsar-client's C++ threads into trio.

pulsar-client calls Python callbacks (send results, message listeners, create/subscribe/close
results) on its own C++ threads, holding the GIL. Two rules follow:

* A callback must never raise: pybind turns the Python exception into a C++ exception on a
  thread that does not catch it, and the process terminates. Every callback here is wrapped
  in ``try/except BaseException``.
* A callback must never block: it runs on Pulsar's I/O or listener thread. It hands its result
  to trio with ``TrioToken.run_sync_soon`` (non-blocking, thread-safe) and returns. If the trio
  run has finished (``trio.RunFinishedError``) the result is dropped: nobody is left to await it.

:class:`TrioWaker` coalesces many callbacks into one trio-side wake-up (a burst of 1,000 send
confirmations costs one ``run_sync_soon``, not 1,000). :class:`NativeCall` turns one C++
asynchronous operation into an awaitable, and cleans up results that arrive after the awaiting
task gave up (cancelled or timed out).

:func:`keep_thread_state` makes the hot callbacks (send results, messages, acks) cheap: see there.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar

import outcome
import trio

from gateway.pulsar.errors import ClosedError, PulsarClientError

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")


def result_name(result: Any) -> str:
    """``_pulsar.Result.Timeout`` → ``"Timeout"`` (also accepts an already-plain string)."""
    name = getattr(result, "name", None)
    return name if isinstance(name, str) else str(result)


def native_error(result: Any, message: str = "") -> PulsarClientError:
    name = result_name(result)
    if name == "AlreadyClosed":
        return ClosedError(message or "already closed")
    return PulsarClientError(name, message)


# pybind11 gives a C++ thread a Python thread state for each call into Python and destroys it
# afterwards; one more PyGILState reference keeps it (CPython only; elsewhere nothing to keep).
_ensure_gil_state: Callable[[], object] | None = getattr(
    getattr(ctypes, "pythonapi", None), "PyGILState_Ensure", None
)
_kept = threading.local()


def keep_thread_state() -> None:
    """Call first thing in a callback that pulsar-client makes often on its own C++ threads.

    pybind11 creates a Python thread state for every callback on a thread that has none and
    tears it down afterwards. That was most of pulsar-client's cost per message: a raw
    ``send_async`` loop used 34 µs of CPU per message with a plain callback and 14-18 µs once
    the callback thread kept its thread state (bench/bench_gateway_vs_pulsar.py prints both).
    The first call on each thread takes one extra PyGILState reference that is never released,
    so the state lives as long as the thread (a few KiB per pulsar-client thread; a state left
    by a thread that ended is freed when the interpreter finalizes). Later calls cost one
    attribute lookup.
    """
    try:
        _kept.done  # noqa: B018 (the lookup is the test)
    except AttributeError:
        _kept.done = True
        if _ensure_gil_state is not None:
            _ensure_gil_state()


def is_ok(result: Any) -> bool:
    # _pulsar.Result is an int enum with Ok = 0; its ``value`` costs about half its ``name``
    # (this runs once per sent message).
    value = getattr(result, "value", None)
    if type(value) is int:
        return value == 0
    return result_name(result) == "Ok"


def weakly(method: Callable[P, None]) -> Callable[P, None]:
    """``method`` of an object, called only while that object lives. For callbacks held by
    native objects (the compiled module's, native/*.c, or pulsar-client's C++ consumer, which
    keeps its message listener until pulsar-client destroys it on its own thread, at a time
    of its choosing), where the garbage collector cannot see: a bound method there would keep
    its owner alive in a cycle nothing breaks in time."""
    ref = weakref.WeakMethod(method)

    def call(*args: P.args, **kwargs: P.kwargs) -> None:
        bound = ref()
        if bound is not None:
            bound(*args, **kwargs)

    return call


class TrioWaker:
    """Run ``fn`` on the trio thread soon after :meth:`wake` is called from any thread.

    Wake-ups are coalesced: while one run is pending, further calls do nothing. Callers append
    their data to a ``collections.deque`` *before* calling :meth:`wake`, and ``fn`` drains the
    deque; since ``_scheduled`` is cleared before ``fn`` runs, an item appended at any moment is
    seen either by the pending run or causes a new one. (All of this relies on the GIL making
    the deque operations and the flag reads/writes atomic.)
    """

    __slots__ = ("_fn", "_scheduled", "_token")

    def __init__(self, fn: Callable[[], None], token: trio.lowlevel.TrioToken | None = None):
        self._fn = fn
        self._token = token or trio.lowlevel.current_trio_token()
        self._scheduled = False

    def wake(self) -> None:
        """Safe from any thread, including C++ callback threads: never raises, never blocks."""
        if self._scheduled:
            return
        self._scheduled = True
        try:  # noqa: SIM105 (hot path: a plain try is cheaper than contextlib.suppress)
            self._token.run_sync_soon(self._run)
        except BaseException:  # RunFinishedError: the trio run is over; nothing to wake
            pass

    def _run(self) -> None:
        self._scheduled = False
        try:
            self._fn()
        except Exception:  # an exception here would crash the trio run (TrioInternalError)
            log.exception("pulsar bridge: drain callback failed")


class NativeCall(Generic[T]):
    """One pulsar-client ``*_async`` operation, awaited from trio.

    Pass one of the ``*_callback`` methods to the C++ call, then ``await call.wait(timeout)``.
    If the awaiting task is cancelled (or times out) before the result arrives, a successful
    result is handed to ``on_abandoned`` (e.g. close the producer nobody will use).
    """

    __slots__ = ("_abandoned", "_event", "_on_abandoned", "_outcome", "_token", "what")

    def __init__(
        self,
        what: str,
        *,
        on_abandoned: Callable[[T], None] | None = None,
        token: trio.lowlevel.TrioToken | None = None,
    ) -> None:
        self.what = what
        self._token = token or trio.lowlevel.current_trio_token()
        self._event = trio.Event()
        self._outcome: outcome.Outcome[T] | None = None
        self._abandoned = False
        self._on_abandoned = on_abandoned

    # --- C++ thread side: never raise ---------------------------------------------------------

    def result_callback(self, result: Any) -> None:
        """For callbacks of type ``(Result) -> None`` (close, flush, unsubscribe)."""
        self.result_value_callback(result, None)

    def result_value_callback(self, result: Any, value: Any) -> None:
        """For callbacks of type ``(Result, value) -> None`` (v1 create/subscribe)."""
        try:
            oc: outcome.Outcome[Any] = (
                outcome.Value(value)
                if is_ok(result)
                else outcome.Error(native_error(result, self.what))
            )
            self._deliver(oc)
        except BaseException:
            pass

    def value_or_error_callback(self, value: Any) -> None:
        """For callbacks of type ``(Error | value) -> None`` (``*_async_v2``)."""
        try:
            if hasattr(value, "error") and hasattr(value, "message"):  # _pulsar.Error
                detail = f"{self.what}: {value.message}" if value.message else self.what
                self._deliver(outcome.Error(native_error(value.error, detail)))
            else:
                self._deliver(outcome.Value(value))
        except BaseException:
            pass

    def _deliver(self, oc: outcome.Outcome[Any]) -> None:
        try:  # noqa: SIM105 (same style as every other C++-thread entry point here)
            self._token.run_sync_soon(self._set, oc)
        except BaseException:  # the trio run is over
            pass

    # --- trio side ----------------------------------------------------------------------------

    def _set(self, oc: outcome.Outcome[T]) -> None:
        if self._abandoned:
            if isinstance(oc, outcome.Value) and self._on_abandoned is not None:
                try:
                    self._on_abandoned(oc.value)
                except Exception:
                    log.exception("pulsar bridge: cleanup of abandoned %s failed", self.what)
            return
        self._outcome = oc
        self._event.set()

    async def wait(self, timeout: float | None = None) -> T:
        """The result; PulsarClientError on failure or when ``timeout`` seconds pass."""
        try:
            if timeout is None:
                await self._event.wait()
            else:
                with trio.move_on_after(timeout):
                    await self._event.wait()
        except BaseException:
            self._abandoned = True
            raise
        if self._outcome is None:
            self._abandoned = True
            raise PulsarClientError("Timeout", f"{self.what}: no answer within {timeout:g} s")
        return self._outcome.unwrap()


def ignore_result(_result: Any) -> None:
    """A C++ callback for fire-and-forget operations (acks): it cannot raise."""
    try:  # noqa: SIM105 (C++-thread entry point: a plain try, like the others)
        keep_thread_state()
    except BaseException:
        pass
