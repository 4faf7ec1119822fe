"""reclaim.py: which ephemeral records are tracked, and claiming them again on the real
ZooKeeper — only for queues that still exist. (A whole session expiry end to end:
tests/integration/metadata/test_zookeeper.py.)"""

from __future__ import annotations

import pytest
import trio
from kazoo.client import KazooClient

from gateway.metadata.codec import ConsumerKey, OwnerKey, consumer_child, owner_child
from gateway.metadata.paths import Folder
from gateway.metadata.zookeeper.reclaim import EphemeralRecord, EphemeralRecords
from gateway.model.entities import Queue
from tests.unit.metadata.conftest import Parts, make_parts

NS = "t/n"


def _consumer(namespace: str, queue: str, serial: int) -> EphemeralRecord:
    child = consumer_child(queue, "replica-1", serial)
    return EphemeralRecord(namespace, queue, Folder.CONSUMERS, child, b"")


def test_records_are_what_the_view_shows() -> None:
    owner = EphemeralRecord(NS, "q", Folder.OWNERS, owner_child("q"), b"{}")
    assert owner.entity() == OwnerKey("q")
    assert _consumer(NS, "q", 3).entity() == ConsumerKey("q", "replica-1", 3)


def test_untracking_a_queue_forgets_only_its_records() -> None:
    unconnected = make_parts("127.0.0.1:1", "/p")  # tracking alone needs no ZooKeeper
    records = EphemeralRecords(unconnected.calls, unconnected.watcher)
    records.track("/a", _consumer(NS, "q", 1))
    records.track("/b", _consumer(NS, "q", 2))
    records.track("/c", _consumer(NS, "other", 1))
    records.track("/d", _consumer("t/elsewhere", "q", 1))
    records.untrack_queue(NS, "q")
    assert "/a" not in records and "/b" not in records
    assert "/c" in records and "/d" in records and len(records) == 2
    records.untrack("/c")
    records.untrack("/c")  # twice: nothing
    assert len(records) == 1


@pytest.mark.integration
async def test_a_new_session_claims_records_of_queues_that_still_exist(
    parts: Parts, namespace: str, raw: KazooClient
) -> None:
    await parts.calls.ensure_paths(namespace, parts.layout.skeleton(namespace), "open")
    state = parts.watcher.start(namespace)
    with trio.fail_after(20):
        await state.loaded.wait()
    await parts.transactions.create_queue(namespace, Queue("kept"))
    await parts.calls.ensure_parents(
        namespace,
        parts.layout.node(namespace, Folder.CONSUMERS, consumer_child("kept", "r", 1)),
        "x",
    )
    kept, gone = _consumer(namespace, "kept", 1), _consumer(namespace, "gone", 1)
    kept_path = parts.layout.node(namespace, Folder.CONSUMERS, kept.child)
    gone_path = parts.layout.node(namespace, Folder.CONSUMERS, gone.child)
    records = parts.ephemerals
    records.track(kept_path, kept)
    records.track(gone_path, gone)

    records.claim_again()
    # The two claims go in one multi, which "gone" fails; each is then sent again alone
    # (group_commit.py), after anything else sent meanwhile: wait for the refusal's answer.
    with trio.fail_after(20):
        while gone_path in records:
            await trio.sleep(0.01)  # polling the condition, with a deadline
    assert await parts.calls.exists(kept_path, "look")
    stat = raw.exists(kept_path)
    assert stat is not None and stat.ephemeralOwner == parts.session.client.client_id[0]
    assert kept_path in records
    assert state.mirror.snapshot().consumers == {"kept": 1}
    # The leader deleted "gone" while the session was away: it stays deleted.
    assert raw.exists(gone_path) is None
    assert gone_path not in records
