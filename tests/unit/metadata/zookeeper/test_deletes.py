"""deletes.py: the cascading delete of a queue or an exchange — conditions, cascades larger
than one transaction, a dangling ref repaired on the way, records and topic keys going with
the entity."""

from __future__ import annotations

import logging

import pytest
import trio
from kazoo.client import KazooClient

from gateway.metadata.codec import binding_id, encode_queue, owner_child, topic_key_child
from gateway.metadata.errors import ConditionNotMet
from gateway.metadata.paths import Folder
from gateway.metadata.store import QueueCondition
from gateway.metadata.zookeeper import deletes
from gateway.metadata.zookeeper.deletes import EntityDeletes, _check_document, _check_records
from gateway.metadata.zookeeper.transactions import QueueRecords
from gateway.model.entities import Binding, Exchange, ExchangeType, Queue
from tests.unit.metadata.conftest import Parts

zk = pytest.mark.integration


def _deletes(parts: Parts) -> EntityDeletes:
    return EntityDeletes(parts.calls, parts.watcher, parts.ephemerals)


def test_conditions_the_queue_document_decides() -> None:
    plain = encode_queue(Queue("q"))
    with pytest.raises(ConditionNotMet, match="not auto-delete"):
        _check_document("q", QueueCondition.ABANDONED, plain)
    never = encode_queue(Queue("q", auto_delete=True))
    with pytest.raises(ConditionNotMet, match="never had a consumer"):
        _check_document("q", QueueCondition.ABANDONED, never)
    with pytest.raises(ConditionNotMet, match="not exclusive"):
        _check_document("q", QueueCondition.ORPHANED, plain)
    _check_document(
        "q", QueueCondition.ORPHANED, encode_queue(Queue("q", exclusive=True, owner="c"))
    )


def test_conditions_the_queue_records_decide() -> None:
    consumed = QueueRecords(consumers=["q,r,1"])
    for condition in (QueueCondition.UNUSED, QueueCondition.ABANDONED):
        with pytest.raises(ConditionNotMet, match="has consumers"):
            _check_records("q", condition, consumed)
    with pytest.raises(ConditionNotMet, match="owner is alive"):
        _check_records("q", QueueCondition.ORPHANED, QueueRecords(owner=True))
    _check_records("q", None, QueueRecords(owner=True, consumers=["q,r,1"]))
    _check_records("q", QueueCondition.ORPHANED, consumed)


@zk
async def test_a_cascade_larger_than_one_transaction(
    parts: Parts, namespace: str, raw: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deletes, "TXN_OPS", 10)  # three bindings (nine ops) per transaction
    writes = parts.transactions
    await writes.create_queue(namespace, Queue("q"))
    await writes.create_exchange(namespace, Exchange("x", ExchangeType.DIRECT))
    bindings = [Binding("q", "x", f"k{index}") for index in range(8)]
    for binding in bindings:
        await writes.add_binding(namespace, binding)

    assert await _deletes(parts).delete_queue(namespace, "q")
    layout = parts.layout
    assert raw.exists(layout.node(namespace, Folder.QUEUES, "q")) is None
    for binding in bindings:
        assert raw.exists(layout.node(namespace, Folder.BINDINGS, binding_id(binding))) is None
    assert raw.get_children(layout.node(namespace, Folder.EXCHANGES, "x")) == []
    assert not await _deletes(parts).delete_queue(namespace, "q")  # gone already


@zk
async def test_a_dangling_ref_does_not_block_the_delete(
    parts: Parts, namespace: str, raw: KazooClient, caplog: pytest.LogCaptureFixture
) -> None:
    writes = parts.transactions
    await writes.create_queue(namespace, Queue("q"))
    # A ref with no binding and no ref under an exchange: only a hand edit makes one.
    dangling = binding_id(Binding("q", "gone", "k"))
    raw.create(f"{parts.layout.node(namespace, Folder.QUEUES, 'q')}/{dangling}")
    with caplog.at_level(logging.ERROR, logger="gateway.metadata.zookeeper"):
        assert await _deletes(parts).delete_queue(namespace, "q")
    assert any("is missing; deleting the rest" in r.getMessage() for r in caplog.records)
    assert raw.exists(parts.layout.node(namespace, Folder.QUEUES, "q")) is None


@zk
async def test_an_orphaned_queue_with_a_live_owner_stays(
    parts: Parts, namespace: str, raw: KazooClient
) -> None:
    writes = parts.transactions
    await writes.create_queue(namespace, Queue("mine", exclusive=True, owner="conn-1"))
    with pytest.raises(ConditionNotMet, match="its owner is alive"):
        await _deletes(parts).delete_queue(namespace, "mine", condition=QueueCondition.ORPHANED)
    owner = parts.layout.node(namespace, Folder.OWNERS, owner_child("mine"))
    # Without the condition the queue goes, its owner record with it, and nothing is left to
    # claim again after a new session.
    assert await _deletes(parts).delete_queue(namespace, "mine")
    assert raw.exists(owner) is None
    assert owner not in parts.ephemerals


@zk
async def test_an_exchange_goes_with_its_bindings_and_known_topic_keys(
    parts: Parts, namespace: str, raw: KazooClient
) -> None:
    await parts.calls.ensure_paths(namespace, parts.layout.skeleton(namespace), "open")
    state = parts.watcher.start(namespace)
    with trio.fail_after(20):
        await state.loaded.wait()
    writes = parts.transactions
    await writes.create_exchange(namespace, Exchange("t", ExchangeType.TOPIC))
    await writes.create_queue(namespace, Queue("q"))
    await writes.add_binding(namespace, Binding("q", "t", "a.*"))
    await writes.register_topic_key(namespace, "t", "a.b")
    await writes.register_topic_key(namespace, "other", "a.b")

    with pytest.raises(ConditionNotMet, match="it has bindings"):
        await _deletes(parts).delete_exchange(namespace, "t", if_unused=True)
    assert await _deletes(parts).delete_exchange(namespace, "t")
    view = state.mirror.snapshot()
    assert "t" not in view.exchanges and not view.bindings
    assert "t" not in view.topic_keys and "other" in view.topic_keys
    node = parts.layout.node
    assert raw.exists(node(namespace, Folder.TOPIC_KEYS, topic_key_child("t", "a.b"))) is None
    assert raw.exists(node(namespace, Folder.TOPIC_KEYS, topic_key_child("other", "a.b")))
