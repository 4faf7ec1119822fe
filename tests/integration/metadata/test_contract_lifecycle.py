"""The Lifecycle role's contract (gateway/metadata/roles.py), on the memory store and on
ZooKeeper (a store per replica, each with its own session): every replica has an identity of its
own, can write while it is connected, and once closed is not and refuses every write."""

from __future__ import annotations

import pytest
import trio

from gateway.metadata.roles import Lifecycle
from gateway.metadata.store import MetadataUnavailable
from gateway.model.entities import Queue
from tests.integration.metadata.conftest import DEADLINE, Fleet, opened

ROLE = Lifecycle  # test_contract_roles.py: every role has its contract


async def test_a_replica_is_connected_until_it_closes(fleet: Fleet, namespace: str) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
    assert a.replica_id != b.replica_id
    with trio.fail_after(DEADLINE):
        await a.wait_connected()
        assert a.connected and b.connected
        await a.aclose()
        await a.wait_connected(False)
    assert not a.connected
    with pytest.raises(MetadataUnavailable):
        await a.create_queue(namespace, Queue("q"))
    # The others go on.
    assert b.connected
    await b.create_queue(namespace, Queue("q"))
    await a.aclose()  # a second close is harmless
