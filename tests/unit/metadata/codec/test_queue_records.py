"""Records about queues (owners, consumers, drains): their znode names and data, and how the
mirror turns listings of them into the view's ``owned``, ``consumers`` and ``drains``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.metadata.codec import (
    ConsumerKey,
    consumer_child,
    consumer_from_child,
    decode_drain,
    drain_child,
    drain_from_child,
    encode_drain,
    encode_queue,
    is_consumed,
    mark_consumed,
    owner_child,
)
from gateway.metadata.mirror import NamespaceMirror
from gateway.metadata.paths import Folder, bucket_for, bucket_of, encode_name
from gateway.metadata.store import REMOVE, DrainRecord
from gateway.model.entities import Queue

names = st.text(max_size=40)


@given(names, names, st.integers(min_value=1, max_value=10**9))
def test_consumer_children_round_trip_and_share_their_queues_bucket(
    queue: str, replica: str, serial: int
) -> None:
    child = consumer_child(queue, replica, serial)
    assert consumer_from_child(child) == ConsumerKey(queue, replica, serial)
    exclusive = consumer_child(queue, None, None)
    assert consumer_from_child(exclusive) == ConsumerKey(queue, "", None)
    bucket = bucket_of(encode_name(queue))
    assert bucket_for(Folder.CONSUMERS, child) == bucket_for(Folder.CONSUMERS, exclusive) == bucket
    assert bucket_for(Folder.DRAINS, drain_child(queue, replica)) == bucket
    assert bucket_for(Folder.OWNERS, owner_child(queue)) == bucket


@pytest.mark.parametrize("child", ["q", "q,r", "q,r,01", "q,r,x", "q,r,1,2", "q,?"])
def test_malformed_consumer_children(child: str) -> None:
    with pytest.raises(ValueError):
        consumer_from_child(child)


@pytest.mark.parametrize("record", [DrainRecord((1, 2)), DrainRecord((1, 2), (3, 4)), REMOVE])
def test_drain_records_round_trip(record: DrainRecord) -> None:
    assert decode_drain(encode_drain(record)) == record


@pytest.mark.parametrize(
    "data",
    [b'{"v":1}', b'{"v":1,"end":[1]}', b'{"v":1,"end":[1,true]}', b'{"v":2,"remove":true}'],
)
def test_bad_drain_documents_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_drain(data)


def test_the_consumed_mark_keeps_the_queue() -> None:
    data = encode_queue(Queue("q", auto_delete=True))
    assert not is_consumed(data)
    marked = mark_consumed(data)
    assert is_consumed(marked) and mark_consumed(marked) == marked


def test_the_mirror_counts_consumers_owners_and_drains() -> None:
    mirror = NamespaceMirror("t/n")
    queue = encode_name("q")
    bucket = bucket_of(queue)
    consumers = [consumer_child("q", "r1", 1), consumer_child("q", "r2", 7)]
    assert mirror.apply_bucket_listing(Folder.CONSUMERS, bucket, consumers, cversion=2) == []
    assert mirror.apply_bucket_listing(Folder.OWNERS, bucket, [queue], cversion=1) == []
    drain = drain_child("q", "x__k")
    assert mirror.apply_bucket_listing(Folder.DRAINS, bucket, [drain], cversion=1) == [drain]
    mirror.apply_data(Folder.DRAINS, drain, encode_drain(DrainRecord((5, 6))))
    view = mirror.snapshot()
    assert view.consumers == {"q": 2}
    assert view.owned == {"q"}
    assert view.drains == {("q", "x__k"): DrainRecord((5, 6))}
    assert drain_from_child(drain, encode_drain(REMOVE)).record == REMOVE
    # A record replaced in place: set_data plus a sentinel created and deleted in one write
    # (cversion +2, same names) makes the mirror read the bucket again.
    assert mirror.apply_bucket_listing(Folder.DRAINS, bucket, [drain], cversion=3) == [drain]
    mirror.apply_data(Folder.DRAINS, drain, encode_drain(REMOVE))
    assert mirror.snapshot().drains == {("q", "x__k"): REMOVE}
    # Consumers go (a replica's session ended).
    mirror.apply_bucket_listing(Folder.CONSUMERS, bucket, consumers[:1], cversion=3)
    mirror.apply_bucket_listing(Folder.OWNERS, bucket, [], cversion=2)
    view = mirror.snapshot()
    assert view.consumers == {"q": 1} and view.owned == frozenset()
