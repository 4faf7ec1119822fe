"""transactions.py: the znodes each write touches, drain records written beside another
write (a wrong guess corrected), the records of a queue as listed, and what a write leaves in
the view and in the ephemeral records to claim again. The store-level behaviour of every
write is in tests/integration/metadata/test_contract_<role>.py (on both stores)."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from gateway.metadata.codec import (
    binding_id,
    decode_drain,
    drain_child,
    encode_drain,
    owner_child,
)
from gateway.metadata.paths import Folder, Layout, encode_name
from gateway.metadata.store import DrainRecord
from gateway.metadata.zookeeper.ops import Create, Delete, SetData
from gateway.metadata.zookeeper.transactions import (
    binding_ref,
    create_ops,
    list_queue_records,
    sentinel,
    unbind_ops,
)
from gateway.model.entities import Binding, Exchange, ExchangeType, Queue
from tests.unit.metadata.conftest import Parts

zk = pytest.mark.integration

LAYOUT = Layout("/p")
NS = "t/n"


def test_a_binding_is_its_node_and_two_refs() -> None:
    binding = Binding("q", "x", "key")
    child = binding_id(binding)
    queue_ref = binding_ref(LAYOUT, NS, Folder.QUEUES, "q", child)
    exchange_ref = binding_ref(LAYOUT, NS, Folder.EXCHANGES, "x", child)
    assert queue_ref == f"{LAYOUT.node(NS, Folder.QUEUES, 'q')}/{child}"
    assert exchange_ref == f"{LAYOUT.node(NS, Folder.EXCHANGES, 'x')}/{child}"
    created = create_ops(LAYOUT, NS, binding)
    assert [op.path for op in created] == [
        LAYOUT.node(NS, Folder.BINDINGS, child),
        queue_ref,
        exchange_ref,
    ]
    node, *refs = created
    assert isinstance(node, Create) and node.data  # the binding's JSON
    assert all(isinstance(ref, Create) and not ref.data for ref in refs)  # refs are empty
    assert unbind_ops(LAYOUT, NS, child) == [Delete(op.path) for op in created]


def test_entities_are_one_node() -> None:
    (exchange,) = create_ops(LAYOUT, NS, Exchange("x", ExchangeType.TOPIC))
    (queue,) = create_ops(LAYOUT, NS, Queue("a/b"))
    assert exchange.path == LAYOUT.node(NS, Folder.EXCHANGES, "x")
    assert queue.path == LAYOUT.node(NS, Folder.QUEUES, encode_name("a/b"))


def test_sentinel_touches_the_queues_drains_bucket_and_leaves_nothing() -> None:
    create, delete = sentinel(LAYOUT, NS, "q")
    assert isinstance(create, Create) and isinstance(delete, Delete)
    assert create.path == delete.path == LAYOUT.node(NS, Folder.DRAINS, "q,")
    # In the bucket of the queue's own drain records, which is what makes replicas look.
    record = LAYOUT.node(NS, Folder.DRAINS, drain_child("q", "t"))
    assert create.path.rsplit("/", 1)[0] == record.rsplit("/", 1)[0]


@zk
async def test_a_drain_record_the_view_did_not_know_of_is_replaced(
    parts: Parts, namespace: str, raw: KazooClient
) -> None:
    writes = parts.transactions
    await writes.create_queue(namespace, Queue("q"))
    await writes.create_exchange(namespace, Exchange("x", ExchangeType.DIRECT))
    # Written behind the store's back: its guess ("no record") is wrong.
    path = parts.layout.node(namespace, Folder.DRAINS, drain_child("q", "topic"))
    raw.create(path, encode_drain(DrainRecord((1, 1))), makepath=True)

    new = DrainRecord((5, 7))
    drain_writes = writes.drain_writes(namespace, {("q", "topic"): new})
    assert [type(op) for op in drain_writes.ops()] == [Create]
    assert await writes.add_binding(namespace, Binding("q", "x", "k"), drains={"topic": new})
    assert decode_drain(raw.get(path)[0]) == new
    # Once corrected, the write is a replacement plus the sentinel.
    await drain_writes.failed(drain_writes.ops()[0], NodeExistsError(), "bind")
    assert [type(op) for op in drain_writes.ops()] == [SetData, Create, Delete]


@zk
async def test_queue_records_are_listed_from_the_queues_buckets(
    parts: Parts, namespace: str, raw: KazooClient
) -> None:
    writes = parts.transactions
    await writes.create_queue(namespace, Queue("q", exclusive=True, owner="conn-1"))
    await writes.create_queue(namespace, Queue("other"))
    first = await writes.add_consumer(namespace, "q", exclusive=False)
    await writes.add_consumer(namespace, "other", exclusive=False)
    drain = parts.layout.node(namespace, Folder.DRAINS, drain_child("q", "t"))
    raw.create(drain, encode_drain(DrainRecord((1, 1))), makepath=True)

    records = await list_queue_records(parts.calls, namespace, "q", "list")
    assert records.owner
    assert records.consumers == [first]  # not the other queue's
    assert records.drains == [drain_child("q", "t")]


@zk
async def test_owner_and_consumer_records_are_tracked_for_claiming_again(
    parts: Parts, namespace: str, raw: KazooClient
) -> None:
    writes = parts.transactions
    await writes.create_queue(namespace, Queue("q", exclusive=True, owner="conn-1"))
    owner_path = parts.layout.node(namespace, Folder.OWNERS, owner_child("q"))
    assert owner_path in parts.ephemerals
    stat = raw.exists(owner_path)
    assert stat is not None and stat.ephemeralOwner != 0  # ephemeral: goes with the session

    consumer = await writes.add_consumer(namespace, "q", exclusive=False)
    consumer_path = parts.layout.node(namespace, Folder.CONSUMERS, consumer)
    assert consumer_path in parts.ephemerals and len(parts.ephemerals) == 2
    await writes.remove_consumer(namespace, "q", consumer)
    assert consumer_path not in parts.ephemerals
    assert raw.exists(consumer_path) is None


@zk
async def test_create_returns_the_winner_of_a_race(parts: Parts, namespace: str) -> None:
    writes = parts.transactions
    first = await writes.create_queue(namespace, Queue("q", durable=True))
    second = await writes.create_queue(namespace, Queue("q", durable=False))
    assert first == second and second.durable  # what is stored, not what was asked
    assert await writes.read_entity(namespace, Folder.QUEUES, "q", "read") == first
    assert await writes.read_entity(namespace, Folder.QUEUES, "none", "read") is None
