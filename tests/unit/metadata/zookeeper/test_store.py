"""store.py: how the assembled store ends — waiters for changes leave when it is closed, and a
closed store refuses work with a clear error. (Everything else the store does is the contract
of tests/integration/metadata/test_contract_<role>.py, run on both stores.)"""

from __future__ import annotations

import pytest
import trio

from gateway.metadata.store import MetadataUnavailable
from gateway.metadata.zookeeper import ZooKeeperMetadataStore
from gateway.model.entities import Queue

pytestmark = pytest.mark.integration

DEADLINE = 20.0


async def test_closing_wakes_every_waiter(zk_hosts: str, zk_prefix: str, namespace: str) -> None:
    store = ZooKeeperMetadataStore(zk_hosts, prefix=zk_prefix)
    view = await store.open(namespace)
    assert store.mirror_of(namespace) is not None
    failures: list[str] = []

    async def wait_for_change() -> None:
        try:
            await store.changed(namespace, view.version)
        except MetadataUnavailable as error:
            failures.append(str(error))

    async def wait_for_another_namespace() -> None:
        try:
            await store.opened(known=1)
        except MetadataUnavailable as error:
            failures.append(str(error))

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_change)
            nursery.start_soon(wait_for_another_namespace)
            await trio.testing.wait_all_tasks_blocked()
            await store.aclose()
    assert failures == ["the metadata store is closed"] * 2
    assert not store.connected
    with pytest.raises(MetadataUnavailable, match=r"cannot declare queue 'q': .* is closed"):
        await store.create_queue(namespace, Queue("q"))
