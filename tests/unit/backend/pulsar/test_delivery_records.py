"""The fleet's delivery records: their encoding, and DeliveryRecord between replicas (on the
memory store, with trio's autojump clock)."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from gateway.backend.pulsar import delivery_records
from gateway.backend.pulsar.delivery_records import (
    NACKS_SENT_AFTER,
    RECORD_INTERVAL,
    DeliveryRecord,
    decode_record,
    encode_record,
)
from gateway.backend.pulsar.redeliveries import Key, Redeliveries
from gateway.metadata.memory import MemoryMetadataStore
from tests.support.received_messages import received

NAMESPACE = "t/n"

keys = st.tuples(st.text(max_size=20), st.text(max_size=40), st.binary(min_size=1, max_size=24))


@given(st.lists(keys, max_size=60))
def test_a_record_holds_exactly_its_keys(entries: list[Key]) -> None:
    assert decode_record(encode_record(entries)) == frozenset(entries)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not zlib",
        zlib.compress(b"not json"),
        zlib.compress(b'{"v":2,"d":[]}'),
        zlib.compress(b'{"v":1}'),
        zlib.compress(b'{"v":1,"d":[["q","t",3]]}'),
        zlib.compress(b'{"v":1,"d":[["q","t","not base64!"]]}'),
        zlib.compress(b'{"v":1,"d":[["q","t"]]}'),
        zlib.compress(b"[1]"),
        encode_record([("q", "t", b"id")])[:-3],
    ],
)
def test_anything_else_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a delivery record"):
        decode_record(data)


def test_a_record_is_compact() -> None:
    # Consecutive message ids of one topic, as a consumer holds them: a few bytes each.
    entries = [
        ("jobs", "persistent://public/default/amq.default__jobs", b"\x08\xb2\x07\x10" + bytes([n]))
        for n in range(200)
    ]
    assert len(encode_record(entries)) < 6 * len(entries)


class Replica:
    def __init__(self, store: MemoryMetadataStore) -> None:
        self.store = store
        self.redeliveries = Redeliveries()
        self.record = DeliveryRecord(store, NAMESPACE, self.redeliveries)
        self.writes = 0
        record_deliveries = store.record_deliveries

        async def counted(namespace: str, record: bytes | None) -> None:
            self.writes += 1
            await record_deliveries(namespace, record)

        store.record_deliveries = counted  # type: ignore[method-assign]


@asynccontextmanager
async def running(*replicas: Replica) -> AsyncIterator[None]:
    """The replicas' records written and followed for the block."""
    async with trio.open_nursery() as nursery:
        for replica in replicas:
            replica.record.start(nursery)
        await trio.sleep(0)
        yield
        nursery.cancel_scope.cancel()


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(RECORD_INTERVAL / 10)


async def test_a_delivery_held_reaches_the_other_replicas(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a = Replica(MemoryMetadataStore())
    b = Replica(a.store.replica())
    async with running(a, b):
        await b.record.ready()
        assert b.record.loaded.is_set()
        a.redeliveries.delivered("q", received(1))
        start = trio.current_time()
        await until(lambda: b.redeliveries.seen("q", received(1)))
        assert trio.current_time() - start <= 2 * RECORD_INTERVAL + 0.01
        assert a.writes == 1
        assert b.redeliveries.delivered("q", received(1))[1] is True  # a died, say
        assert not b.redeliveries.seen("q", received(2))


async def test_deliveries_settled_within_an_interval_are_never_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a = Replica(MemoryMetadataStore())
    async with running(a):
        for entry in range(100):
            key, _ = a.redeliveries.delivered("q", received(entry))
            await trio.sleep(RECORD_INTERVAL / 4)
            a.redeliveries.settled(key)
        await trio.sleep(10 * RECORD_INTERVAL)
        assert a.writes == 0


async def test_a_flush_writes_what_was_just_delivered_and_a_settled_record_empties(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a = Replica(MemoryMetadataStore())
    async with running(a):
        key, _ = a.redeliveries.delivered("q", received(1))
        await a.record.flush()
        assert a.writes == 1
        assert await a.store.delivery_recorders(NAMESPACE) == {a.store.replica_id}
        await a.record.flush()  # nothing new: no write
        assert a.writes == 1
        a.redeliveries.settled(key)
        # Removed once nothing is left, within SHRINK_EVERY intervals.
        await until(
            lambda: a.writes == 2, timeout=(delivery_records.SHRINK_EVERY + 2) * RECORD_INTERVAL
        )
        assert await a.store.delivery_recorders(NAMESPACE) == set()


async def test_a_consumer_that_gave_messages_back_waits_for_its_nacks_to_be_sent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a = Replica(MemoryMetadataStore())
    async with running(a):
        a.redeliveries.delivered("q", received(1))
        nacked = trio.current_time()
        await a.record.returned(nacked)
        assert trio.current_time() >= nacked + NACKS_SENT_AFTER
        assert a.writes == 1  # and the record holds the message


async def test_without_its_writer_running_nobody_waits() -> None:
    record = DeliveryRecord(MemoryMetadataStore(), NAMESPACE, Redeliveries())
    with trio.fail_after(0.5):
        await record.ready()
        await record.flush()


async def test_an_unreadable_record_of_another_replica_marks_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a = Replica(MemoryMetadataStore())
    other = a.store.replica()
    await other.record_deliveries(NAMESPACE, b"garbage")
    await other.aclose()
    async with running(a):
        await a.record.ready()
        assert a.record.loaded.is_set()
        assert len(a.redeliveries.elsewhere) == 0


async def test_a_delivery_is_marked_while_any_other_record_holds_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a = Replica(MemoryMetadataStore())
    b, c = a.store.replica(), a.store.replica()
    one, two = (("q", "persistent://t/n/q", received(n).id_bytes) for n in (1, 2))

    async def marked() -> set[int]:
        await trio.testing.wait_all_tasks_blocked()  # the follower has taken the change in
        return {n for n in (1, 2) if a.redeliveries.seen("q", received(n))}

    async with running(a):
        await b.record_deliveries(NAMESPACE, encode_record([one, two]))
        await c.record_deliveries(NAMESPACE, encode_record([one]))
        assert await marked() == {1, 2}
        await b.record_deliveries(NAMESPACE, encode_record([two]))  # b's client acked one
        assert await marked() == {1, 2}  # c still holds it
        await c.record_deliveries(NAMESPACE, None)
        assert await marked() == {2}
        await a.store.drop_deliveries(NAMESPACE, b.replica_id)  # the leader's cleanup
        assert await marked() == set()
        assert len(a.redeliveries.elsewhere) == 0
