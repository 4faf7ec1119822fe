"""ProducerCache against the real broker: one producer per topic, idle ones closed."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from gateway.pulsar.client import PulsarClient
from gateway.pulsar.errors import ClosedError
from gateway.pulsar.producer import TrioProducer
from gateway.pulsar.producer_cache import ProducerCache
from tests.integration.pulsar.conftest import wait_for

pytestmark = pytest.mark.integration

Topic = Callable[[str], str]


async def test_concurrent_first_use_creates_one_producer(
    client: PulsarClient, topic: Topic
) -> None:
    cache = ProducerCache(client)
    got: list[TrioProducer] = []

    async def use(name: str) -> None:
        got.append(await cache.get(name))

    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(use, topic("one"))
        nursery.start_soon(use, topic("two"))
    assert cache.created == 2
    ones = [p for p in got if p.topic == topic("one")]
    assert len(ones) == 10 and all(p is ones[0] for p in ones)
    assert await cache.get(topic("one")) is ones[0]  # reused
    handle = await cache.submit(topic("two"), b"x", {"k": "v"})
    await handle.durable()
    assert cache.created == 2
    await cache.aclose()
    assert all(p.closed for p in got)
    with pytest.raises(ClosedError):
        await cache.get(topic("one"))


async def test_idle_producers_are_closed_and_recreated_on_use(
    client: PulsarClient, topic: Topic
) -> None:
    cache = ProducerCache(client, idle_timeout=0.3, sweep_interval=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(cache.run_sweeper)
        busy = await cache.get(topic("busy"))
        idle = await cache.get(topic("idle"))
        await (await cache.submit(topic("idle"), b"once")).durable()

        async def idle_closed() -> bool:
            # Keep "busy" busy while "idle" ages out.
            await (await cache.submit(topic("busy"), b"tick")).durable()
            return idle.closed

        await wait_for(idle_closed, timeout=10)
        assert not busy.closed
        assert topic("idle") not in cache.producers and cache.idled_out == 1
        again = await cache.get(topic("idle"))
        assert again is not idle and not again.closed and cache.created == 3
        await (await cache.submit(topic("idle"), b"after")).durable()
        nursery.cancel_scope.cancel()
    await cache.aclose()


async def test_submit_survives_a_producer_closed_under_it(
    client: PulsarClient, topic: Topic
) -> None:
    cache = ProducerCache(client)
    first = await cache.get(topic("t"))
    await first.aclose()  # e.g. closed by the sweeper between get() and submit()
    handle = await cache.submit(topic("t"), b"x")
    await handle.durable()
    assert cache.created == 2
    await cache.aclose()
