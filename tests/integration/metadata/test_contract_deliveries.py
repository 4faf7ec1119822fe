"""The MetadataStore contract for the replicas' delivery records (AMQP's ``redelivered``
across replicas: backend/pulsar/delivery_records.py). Run against the memory store and the
ZooKeeper store (a store per replica, each with its own session)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import trio

from gateway.metadata.roles import Deliveries
from gateway.metadata.store import MetadataStore
from tests.integration.metadata.conftest import DEADLINE, Fleet, opened

ROLE = Deliveries  # test_contract_roles.py: every role has its contract


class Followed:
    """What ``follow_deliveries`` reported last, with an event per report."""

    def __init__(self) -> None:
        self.records: dict[str, bytes] | None = None
        self.reports = 0
        self._changed = trio.Event()

    def update(self, records: Mapping[str, bytes]) -> None:
        self.records = dict(records)
        self.reports += 1
        self._changed.set()
        self._changed = trio.Event()

    async def until(self, predicate: Callable[[dict[str, bytes]], bool]) -> dict[str, bytes]:
        with trio.fail_after(DEADLINE):
            while self.records is None or not predicate(self.records):
                await self._changed.wait()
            return self.records


async def _until_live(store: MetadataStore, namespace: str, replicas: set[str]) -> None:
    with trio.fail_after(DEADLINE):
        while await store.live_replicas(namespace) != replicas:
            await trio.sleep(0.01)


async def test_delivery_records_reach_the_others_and_outlive_their_replica(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
    followed = Followed()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(b.follow_deliveries, namespace, followed.update)
        assert await followed.until(lambda records: True) == {}  # read, and nothing there

        await a.record_deliveries(namespace, b"first")
        await followed.until(lambda records: records == {a.replica_id: b"first"})
        await a.record_deliveries(namespace, b"second")
        await followed.until(lambda records: records == {a.replica_id: b"second"})
        # A replica's own record is not reported to it.
        await b.record_deliveries(namespace, b"b's")
        assert await a.delivery_recorders(namespace) == {a.replica_id, b.replica_id}
        assert followed.records == {a.replica_id: b"second"}

        # The replicas that have the namespace open are its candidates for leader.
        for store in (a, b):
            nursery.start_soon(store.lead, namespace, trio.sleep_forever)
        await _until_live(b, namespace, {a.replica_id, b.replica_id})

        # A replica's death ends its candidacy but not its record: the others need it most
        # then.
        await a.aclose()
        await _until_live(b, namespace, {b.replica_id})
        assert await b.delivery_recorders(namespace) == {a.replica_id, b.replica_id}
        assert followed.records == {a.replica_id: b"second"}

        # The leader's cleanup, and a replica emptying its own record.
        await b.drop_deliveries(namespace, a.replica_id)
        await followed.until(lambda records: records == {})
        await b.record_deliveries(namespace, None)
        await b.record_deliveries(namespace, None)  # nothing there: fine
        assert await b.delivery_recorders(namespace) == set()
        nursery.cancel_scope.cancel()


async def test_a_follower_sees_records_written_before_it_started(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    await a.record_deliveries(namespace, b"x" * 100_000)
    c = await opened(fleet, namespace)  # a replica that starts later (or restarts)
    followed = Followed()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c.follow_deliveries, namespace, followed.update)
        assert await followed.until(lambda records: bool(records)) == {a.replica_id: b"x" * 100_000}
        nursery.cancel_scope.cancel()
