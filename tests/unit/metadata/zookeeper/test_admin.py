"""admin.py on the real ZooKeeper: a bulk import in several batched transactions (one of them
meeting an entity that exists), and deleting a whole namespace down to its root."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from gateway.metadata.codec import binding_id
from gateway.metadata.paths import Folder
from gateway.metadata.zookeeper import admin
from gateway.metadata.zookeeper.admin import NamespaceAdmin
from gateway.model.entities import Binding, Exchange, ExchangeType, Queue
from tests.unit.metadata.conftest import Parts

pytestmark = pytest.mark.integration


def _admin(parts: Parts) -> NamespaceAdmin:
    return NamespaceAdmin(parts.calls, parts.watcher, parts.transactions)


async def test_bulk_create_then_delete_the_namespace(
    parts: Parts, namespace: str, raw: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin, "TXN_OPS", 9)  # several batches, several in flight
    # One queue exists already: its batch fails whole and is redone one entity at a time.
    await parts.transactions.create_queue(namespace, Queue("q3", durable=True))
    queues = [Queue(f"q{index}") for index in range(10)]
    bindings = [Binding(queue.name, "x", "k") for queue in queues]
    await _admin(parts).bulk_create(
        namespace,
        exchanges=[Exchange("x", ExchangeType.DIRECT)],
        queues=queues,
        bindings=bindings,
        concurrency=3,
    )
    layout = parts.layout
    queue_folder = layout.folder(namespace, Folder.QUEUES)
    stored = {
        child
        for bucket in raw.get_children(queue_folder)
        for child in raw.get_children(f"{queue_folder}/{bucket}")
    }
    assert stored == {queue.name for queue in queues}
    for binding in bindings:
        assert raw.exists(layout.node(namespace, Folder.BINDINGS, binding_id(binding)))
    assert len(raw.get_children(layout.node(namespace, Folder.EXCHANGES, "x"))) == 10

    await _admin(parts).delete_namespace(namespace, concurrency=3)
    assert raw.exists(layout.namespace(namespace)) is None
    await _admin(parts).delete_namespace(namespace)  # nothing there: fine
