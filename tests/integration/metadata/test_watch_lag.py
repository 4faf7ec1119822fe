"""The watch lag reported by the ZooKeeper store: changes by other replicas, after the load."""

from __future__ import annotations

import time

import pytest

from gateway.metadata.zookeeper import ZooKeeperMetadataStore
from gateway.model.entities import Binding, Exchange, ExchangeType, Queue
from tests.integration.metadata.conftest import ZooKeeperFleet, wait_for

pytestmark = pytest.mark.integration


async def _replica(fleet: ZooKeeperFleet, lags: list[float]) -> ZooKeeperMetadataStore:
    store = ZooKeeperMetadataStore(fleet.hosts, prefix=fleet.prefix, watch_lag=lags.append)
    fleet.stores.append(store)
    await store.connect()
    return store


async def test_a_change_by_one_replica_is_one_lag_observation_on_the_other(
    zk_fleet: ZooKeeperFleet, namespace: str
) -> None:
    lags_a: list[float] = []
    lags_b: list[float] = []
    a = await _replica(zk_fleet, lags_a)
    await a.open(namespace)
    for index in range(30):
        await a.create_queue(namespace, Queue(f"before-{index}"))

    b = await _replica(zk_fleet, lags_b)
    view = await b.open(namespace)
    assert len(view.queues) == 30
    assert lags_b == []  # the first load is not lag

    written = time.time()
    await a.create_queue(namespace, Queue("after"))
    await wait_for(b, namespace, lambda v: "after" in v.queues)
    seen = time.time()
    assert len(lags_b) == 1
    # ZooKeeper stamps the write after we sent it (in whole ms) and b reported it before we
    # saw b's view change: one clock here, so the lag lies between those two instants.
    assert 0.0 <= lags_b[0] <= seen - written + 0.002

    await a.create_exchange(namespace, Exchange("ex", ExchangeType.DIRECT))
    await wait_for(b, namespace, lambda v: "ex" in v.exchanges)
    assert len(lags_b) == 2

    # A binding without arguments is all in its znode's name: never read, not measured.
    await a.add_binding(namespace, Binding("after", "ex", "k"))
    await wait_for(b, namespace, lambda v: Binding("after", "ex", "k") in v.bindings)
    assert len(lags_b) == 2

    # A replica's own writes are in its view when they return: no lag to report.
    assert lags_a == []
