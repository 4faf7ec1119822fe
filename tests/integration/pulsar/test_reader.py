"""TrioReader against the real broker: what ``receive_nowait`` hands over without waiting."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from gateway.pulsar.client import PulsarClient
from gateway.pulsar.ids import EARLIEST
from gateway.pulsar.producer import ProducerOptions
from gateway.pulsar.reader import open_reader

pytestmark = pytest.mark.integration


async def test_receive_nowait_takes_what_was_read_in_order_and_never_waits(
    client: PulsarClient, topic: Callable[[str], str]
) -> None:
    name = topic("read-nowait")
    producer = await client.create_producer(name, ProducerOptions(batching_enabled=False))
    for n in range(20):
        await producer.send(f"m{n}".encode())
    reader = await open_reader(client, name, EARLIEST, read_ahead=8)
    try:
        assert reader.receive_nowait() is None  # nothing asked for before the first receive
        got = [(await reader.receive()).payload]
        with trio.fail_after(30):
            while len(got) < 20:
                while not reader.ready:  # the next read's answer is on its way
                    await trio.sleep(0.005)
                read = reader.receive_nowait()
                assert read is not None  # ready: handed over without a wait
                got.append(read.payload)
        assert got == [f"m{n}".encode() for n in range(20)]
        assert reader.receive_nowait() is None  # the end of the topic: None, not a wait
    finally:
        await reader.aclose()
    assert reader.receive_nowait() is None
    await producer.aclose()
