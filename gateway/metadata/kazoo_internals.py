"""The kazoo internals the ZooKeeper store relies on, checked when a session is made.

kazoo (pinned to the version these were verified on, 2.11.0, in pyproject.toml) has no public
way to send a request it does not know, to see a persistent watch's events, or to run an
answer's callback on the thread that reads it. The store uses its private parts for those:

* **calls** — ``KazooClient._call(request, async_result)``, kazoo's request queue, for the
  requests kazoo lacks (multiread.py, mixed_read.py, persistent_watch.py's ``AddWatch``) and
  for transactions and listings with a direct callback (zookeeper/group_commit.py,
  zookeeper/watcher.py, kazoo_session.py). There is no store without it: a kazoo that changed
  it is refused at start with :class:`KazooInternalsChanged`, naming what differs.
* **handler** — kazoo_handler.py's ``DirectAsyncResult`` overrides
  ``AsyncResult._do_callbacks`` (using ``_callbacks``, ``_handler``), and ``TrioHandler``
  overrides ``dispatch_callback`` and uses ``completion_queue`` and ``running``. Without them
  the session falls back to kazoo's own ``SequentialThreadingHandler`` and connection
  (answers through kazoo's completion thread, one-shot watches: slower, same behaviour).
* **connection** — persistent_watch.py replaces ``client._connection`` (made with
  ``retry_sleeper``, ``logger``, ``sasl_options``) by a ``ConnectionHandler`` subclass that
  overrides ``_connect``, ``_read``, ``_read_socket``, ``_send_request``, ``_write``,
  ``_read_watch_event`` and reads ``_socket``, ``_socket_error_handling``,
  ``client._queue``, ``client._stopped``, ``client._data_watchers``,
  ``client._child_watchers``. Without them the session keeps kazoo's connection and the
  watcher follows changes with one-shot watches, as on a ZooKeeper before 3.6.

Each fallback is logged once, as a WARNING naming what differs. The contract tests
(tests/unit/metadata/test_kazoo_internals.py) check each internal on the installed kazoo.

The other modules reach these internals only through the functions below (``submit_call``,
``has_queued_requests``, ``is_stopped``, ``has_one_shot_watch``, ``connection_of``,
``replace_connection``): what depends on kazoo's private parts stays in this one module.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "CALLS",
    "CONNECTION",
    "HANDLER",
    "INTERNALS",
    "KazooInternalsChanged",
    "Problems",
    "call_problems",
    "connection_of",
    "connection_problems",
    "handler_problems",
    "has_one_shot_watch",
    "has_queued_requests",
    "is_stopped",
    "problems_of",
    "replace_connection",
    "submit_call",
    "usable_internals",
]

log = logging.getLogger(__name__)

Problems = list[str]

CALLS: Final = "calls"
HANDLER: Final = "handler"
CONNECTION: Final = "connection"


class KazooInternalsChanged(RuntimeError):
    """The installed kazoo lacks an internal the store cannot do without."""


# The internals themselves, as the rest of the store uses them. ``client`` is a KazooClient,
# typed Any as kazoo ships no type hints.


def submit_call(client: Any, request: Any, async_result: Any) -> None:
    """Queue ``request`` (any object with ``type``, ``serialize`` and ``deserialize``) on
    ``client``'s connection; its answer or error settles ``async_result``."""
    client._call(request, async_result)


def has_queued_requests(client: Any) -> bool:
    """Whether requests wait in ``client``'s queue to be sent."""
    return bool(client._queue)


def is_stopped(client: Any) -> bool:
    """Whether ``client`` was stopped (its events are no longer wanted)."""
    return bool(client._stopped.is_set())


def has_one_shot_watch(client: Any, path: str) -> bool:
    """Whether one of kazoo's own (one-shot) data or children watchers waits on ``path``
    (the full path, with the chroot)."""
    return path in client._data_watchers or path in client._child_watchers


def connection_of(client: Any) -> Any:
    """``client``'s ConnectionHandler."""
    return client._connection


def replace_connection(client: Any, connection: Any) -> None:
    """Make ``connection`` (a ConnectionHandler of ``client``) the one ``client`` uses;
    before ``client`` starts."""
    client._connection = connection


def _method(cls: Any, name: str, params: tuple[str, ...]) -> str | None:
    """None if ``cls.name`` is a function taking exactly ``params`` (after self)."""
    function = getattr(cls, name, None)
    if function is None:
        return "missing"
    if not callable(function):
        return "not callable"
    try:
        found = tuple(inspect.signature(function).parameters)[1:]
    except (TypeError, ValueError):
        return "no readable signature"
    if found != params:
        return f"takes {found}, not {params}"
    return None


@functools.cache
def _client() -> Any:
    from kazoo.client import KazooClient

    # One, not started: no thread, no socket. The address is never contacted.
    return KazooClient(hosts="127.0.0.1:1")


def _client_attribute(name: str) -> Callable[[], str | None]:
    return lambda: None if hasattr(_client(), name) else "missing on a new KazooClient"


def _call() -> str | None:
    from kazoo.client import KazooClient

    problem = _method(KazooClient, "_call", ("request", "async_object"))
    if problem is None and "_queue.append((request, async_object))" not in inspect.getsource(
        KazooClient._call
    ):
        problem = "no longer queues (request, async_object)"
    return problem


def _connection() -> str | None:
    from kazoo.protocol.connection import ConnectionHandler

    connection = getattr(_client(), "_connection", None)
    if connection is None:
        return "missing on a new KazooClient"
    if not isinstance(connection, ConnectionHandler):
        return f"a {type(connection).__name__}, not a ConnectionHandler"
    missing = [
        name
        for name in ("retry_sleeper", "logger", "sasl_options", "_socket", "handler")
        if not hasattr(connection, name)
    ]
    return f"has no {', '.join(missing)}" if missing else None


def _connection_method(name: str, params: tuple[str, ...]) -> Callable[[], str | None]:
    def check() -> str | None:
        from kazoo.protocol.connection import ConnectionHandler

        problem = _method(ConnectionHandler, name, params)
        # WatchingConnection sees events by overriding it: _read_socket must call it.
        if (
            problem is None
            and name == "_read_watch_event"
            and "_read_watch_event" not in inspect.getsource(ConnectionHandler._read_socket)
        ):
            problem = "no longer called by _read_socket"
        return problem

    return check


def _do_callbacks() -> str | None:
    from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler

    problem = _method(AsyncResult, "_do_callbacks", ())
    if problem is not None:
        return problem
    ran: list[bool] = []

    class Probe(AsyncResult):  # type: ignore[misc]
        def _do_callbacks(self) -> None:
            ran.append(True)

    Probe(SequentialThreadingHandler()).set(None)
    return None if ran else "no longer called by AsyncResult.set"


def _result_attributes() -> str | None:
    from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler

    result = AsyncResult(SequentialThreadingHandler())
    missing = [name for name in ("_callbacks", "_handler") if not hasattr(result, name)]
    return f"has no {', '.join(missing)}" if missing else None


def _handler_dispatch() -> str | None:
    from kazoo.handlers.threading import SequentialThreadingHandler

    problem = _method(SequentialThreadingHandler, "dispatch_callback", ("callback",))
    if problem is None:
        handler = SequentialThreadingHandler()
        missing = [n for n in ("completion_queue", "running") if not hasattr(handler, n)]
        problem = f"the handler has no {', '.join(missing)}" if missing else None
    return problem


_CONNECTION_METHODS: Final[dict[str, tuple[str, ...]]] = {
    "__init__": ("client", "retry_sleeper", "logger", "sasl_options"),
    "_connect": ("host", "hostip", "port"),
    "_read": ("length", "timeout"),
    "_read_socket": ("read_timeout",),
    "_send_request": ("read_timeout", "connect_timeout"),
    "_write": ("msg", "timeout"),
    "_read_watch_event": ("buffer", "offset"),
    "_socket_error_handling": (),
}

# Every kazoo internal the store relies on: its name -> (what uses it, its check, which
# returns what differs or None).
INTERNALS: Final[dict[str, tuple[str, Callable[[], str | None]]]] = {
    "KazooClient._call": (CALLS, _call),
    "KazooClient._connection": (CONNECTION, _connection),
    **{
        f"KazooClient.{name}": (CONNECTION, _client_attribute(name))
        for name in ("_queue", "_stopped", "_data_watchers", "_child_watchers", "use_ssl")
    },
    **{
        f"ConnectionHandler.{name}": (CONNECTION, _connection_method(name, params))
        for name, params in _CONNECTION_METHODS.items()
    },
    "AsyncResult._do_callbacks": (HANDLER, _do_callbacks),
    "AsyncResult._callbacks/_handler": (HANDLER, _result_attributes),
    "SequentialThreadingHandler.dispatch_callback": (HANDLER, _handler_dispatch),
}


def problems_of(group: str) -> Problems:
    """What differs among the internals of ``group`` (CALLS, HANDLER, CONNECTION)."""
    found = []
    for name, (where, check) in INTERNALS.items():
        if where == group and (problem := check()) is not None:
            found.append(f"{name}: {problem}")
    return found


def call_problems() -> Problems:
    return problems_of(CALLS)


def handler_problems() -> Problems:
    return problems_of(HANDLER)


def connection_problems() -> Problems:
    return problems_of(CONNECTION)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kazoo")
    except PackageNotFoundError:
        return "(unknown version)"


@functools.cache
def _fallbacks() -> tuple[bool, bool]:
    handler = handler_problems()
    connection = connection_problems()
    if handler or connection:
        log.warning(
            "kazoo %s differs from the 2.11.0 the metadata store was verified on (%s): using "
            "kazoo's own %s, and one-shot watches instead of persistent ones "
            '(docs/metadata.md, "kazoo internals")',
            _version(),
            "; ".join(handler + connection),
            "handler and connection" if handler else "connection",
        )
    # The direct callbacks of TrioHandler keep persistent watch events in order with the
    # answers; without them the events could overtake answers, so no WatchingConnection.
    return not handler, not handler and not connection


@functools.cache
def _checked_calls() -> tuple[str, ...]:
    return tuple(call_problems())


def usable_internals() -> tuple[bool, bool]:
    """``(trio handler, watching connection)``: which of kazoo_handler.TrioHandler and
    persistent_watch.WatchingConnection this kazoo lets a session use (one WARNING, once per
    process, when not both). Raises :class:`KazooInternalsChanged` when ``KazooClient._call``
    itself changed: the store cannot work without it."""
    problems = _checked_calls()
    if problems:
        raise KazooInternalsChanged(
            f"kazoo {_version()} changed what the ZooKeeper metadata store needs: "
            f"{'; '.join(problems)}. Install kazoo==2.11.0 (pyproject.toml)."
        )
    return _fallbacks()
