"""Contract tests for the kazoo internals the ZooKeeper store relies on
(gateway/metadata/kazoo_internals.py), one per internal, on the installed kazoo (pinned in
pyproject.toml): each fails naming the internal when a kazoo version changed it. Then what
the gateway does on such a version: refuses to start when ``KazooClient._call`` changed, and
otherwise falls back to kazoo's own handler and connection with one warning, a store then
following other replicas' changes with one-shot watches."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator

import pytest
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, UnimplementedError
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.serialization import Exists

from gateway.metadata import kazoo_internals, kazoo_session
from gateway.metadata.kazoo_handler import TrioHandler
from gateway.metadata.kazoo_internals import (
    CALLS,
    CONNECTION,
    HANDLER,
    INTERNALS,
    KazooInternalsChanged,
    connection_of,
    has_one_shot_watch,
    has_queued_requests,
    is_stopped,
    replace_connection,
    submit_call,
    usable_internals,
)
from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.persistent_watch import WatchingConnection
from gateway.metadata.zookeeper import ZooKeeperMetadataStore
from gateway.model.entities import Queue

# kazoo's module-level protocol helpers imported by multiread.py, mixed_read.py,
# persistent_watch.py and zookeeper/group_commit.py (semi-public: no leading underscore, but
# not documented either).
SERIALIZATION = [
    ("kazoo.protocol.serialization", name)
    for name in (
        "MultiHeader",
        "int_struct",
        "multiheader_struct",
        "stat_struct",
        "write_string",
        "read_string",
        "read_buffer",
        "Watch",
        "Transaction",
        "CheckVersion",
        "Create",
        "Delete",
        "SetData",
        "Exists",
    )
] + [("kazoo.exceptions", "EXCEPTIONS"), ("kazoo.protocol.connection", "ConnectionHandler")]


@pytest.mark.parametrize("name", list(INTERNALS))
def test_kazoo_internal(name: str) -> None:
    _group, check = INTERNALS[name]
    problem = check()
    assert problem is None, f"internal changed: kazoo {name}: {problem}"


@pytest.mark.parametrize(("module", "name"), SERIALIZATION, ids=lambda v: str(v))
def test_kazoo_protocol_helper(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"internal changed: {module}.{name}"


def test_every_group_is_checked() -> None:
    assert {group for group, _ in INTERNALS.values()} == {CALLS, HANDLER, CONNECTION}
    assert "KazooClient._call" in INTERNALS and "KazooClient._connection" in INTERNALS


def test_the_accessors_read_and_use_a_new_client() -> None:
    client = KazooClient(hosts="127.0.0.1:1")  # not started: no thread, no socket
    assert is_stopped(client)
    assert not has_queued_requests(client)
    assert not has_one_shot_watch(client, "/nothing")
    original = connection_of(client)
    replacement = WatchingConnection(
        client, original.retry_sleeper, logger=original.logger, sasl_options=original.sasl_options
    )
    replace_connection(client, replacement)
    assert connection_of(client) is replacement
    # A client that is not connected refuses the request through its result, as kazoo does.
    result = client.handler.async_result()
    submit_call(client, Exists("/", None), result)
    with pytest.raises(ConnectionClosedError):
        result.get(timeout=1)


@pytest.fixture
def fresh_checks() -> Iterator[None]:
    kazoo_internals._fallbacks.cache_clear()
    kazoo_internals._checked_calls.cache_clear()
    yield
    kazoo_internals._fallbacks.cache_clear()
    kazoo_internals._checked_calls.cache_clear()


def _changed(monkeypatch: pytest.MonkeyPatch, name: str, problem: str) -> None:
    group, _check = INTERNALS[name]
    monkeypatch.setitem(INTERNALS, name, (group, lambda: problem))


def test_this_kazoo_needs_no_fallback(fresh_checks: None) -> None:
    assert usable_internals() == (True, True)


def test_a_changed_call_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, fresh_checks: None
) -> None:
    _changed(monkeypatch, "KazooClient._call", "takes ('request',), not ('request', 'o')")
    with pytest.raises(KazooInternalsChanged, match=r"KazooClient\._call: takes") as raised:
        KazooSession(
            "127.0.0.1:1",
            owner="test",
            session_timeout=10,
            connect_timeout=1,
            request_timeout=1,
        )
    assert "kazoo==2.11.0" in str(raised.value)


def _session() -> KazooSession:
    return KazooSession(
        "127.0.0.1:1", owner="test", session_timeout=10, connect_timeout=1, request_timeout=1
    )


def test_a_changed_connection_keeps_kazoos_own_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, fresh_checks: None, caplog: pytest.LogCaptureFixture
) -> None:
    _changed(monkeypatch, "ConnectionHandler._read_watch_event", "missing")
    caplog.set_level(logging.WARNING, logger=kazoo_internals.__name__)
    sessions = [_session(), _session()]
    for session in sessions:
        assert isinstance(session.client.handler, TrioHandler)
        assert not isinstance(session.client._connection, WatchingConnection)
        assert not session.persistent_watches
    result = sessions[0].watch_tree("/x", lambda event, path: None)
    with pytest.raises(UnimplementedError):
        result.get_nowait()
    sessions[0].unwatch_tree("/x")
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1  # once per process
    assert "ConnectionHandler._read_watch_event: missing" in warnings[0]
    assert "one-shot watches" in warnings[0]


def test_a_changed_handler_keeps_kazoos_own_handler_and_connection(
    monkeypatch: pytest.MonkeyPatch, fresh_checks: None, caplog: pytest.LogCaptureFixture
) -> None:
    _changed(monkeypatch, "AsyncResult._do_callbacks", "no longer called by AsyncResult.set")
    caplog.set_level(logging.WARNING, logger=kazoo_internals.__name__)
    session = _session()
    assert type(session.client.handler) is SequentialThreadingHandler
    assert not isinstance(session.client._connection, WatchingConnection)
    assert not session.persistent_watches
    assert "AsyncResult._do_callbacks" in caplog.records[0].getMessage()


@pytest.mark.integration
async def test_a_store_on_the_fallback_follows_other_replicas(
    monkeypatch: pytest.MonkeyPatch,
    fresh_checks: None,
    zk_hosts: str,
    zk_prefix: str,
    namespace: str,
) -> None:
    """With kazoo's own connection a replica learns another's declare by one-shot watches."""
    _changed(monkeypatch, "KazooClient._stopped", "missing on a new KazooClient")
    fallback = ZooKeeperMetadataStore(zk_hosts, prefix=zk_prefix)
    monkeypatch.undo()
    kazoo_internals._fallbacks.cache_clear()
    writer = ZooKeeperMetadataStore(zk_hosts, prefix=zk_prefix)
    try:
        await fallback.connect()
        await writer.connect()
        assert not fallback._session.persistent_watches
        await writer.open(namespace)
        await fallback.open(namespace)
        await writer.create_queue(namespace, Queue("from-the-writer", durable=True))
        with trio.fail_after(10):
            view = fallback.view(namespace)
            while "from-the-writer" not in view.queues:
                view = await fallback.changed(namespace, view.version)
    finally:
        await writer.aclose()
        await fallback.aclose()


def test_the_session_module_uses_the_check() -> None:
    assert kazoo_session.usable_internals is usable_internals
