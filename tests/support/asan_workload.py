"""A short workload through both compiled modules, for tests/integration/test_native_asan.py,
which runs it in a Python with libasan preloaded and the modules built with AddressSanitizer:

    python -m tests.support.asan_workload <broker url> <topic> <topic>

The frame scan (gateway/amqp/native/) takes publishes and acks whole, byte at a time and cut
everywhere, with the bytes mutated, and its property check takes random bytes; the Pulsar
module (gateway/pulsar/native/) sends groups and receives, acknowledges, negatively
acknowledges and pauses on a full buffer, over two topics, then closes with messages still
queued. Prints ``workload done`` at the end; any ASan report ends the process before that.
"""

from __future__ import annotations

import contextlib
import random
import sys
from typing import Any

import trio

from gateway.amqp import compiled as amqp_compiled
from gateway.pulsar import compiled as pulsar_compiled
from gateway.pulsar.client import ClientOptions, PulsarClient
from gateway.pulsar.consumer import ConsumerOptions
from gateway.pulsar.producer import ProducerOptions
from tests.support.core_client import Client, commands, method, publish


def frames() -> None:
    from gateway.amqp.connection import ConnectionSettings

    check = amqp_compiled.property_check()
    assert amqp_compiled.frame_scan() is not None and check is not None, "frame scan not loaded"
    rich = commands.Basic.Properties(
        content_type="text/plain", headers={"k": "v", "n": [1, 2.5]}, priority=4
    )
    data = b"".join(
        [
            *(publish(1, b"m%d" % i, routing_key=f"k{i}", properties=rich) for i in range(30)),
            *(method(1, commands.Basic.Ack(delivery_tag=i)) for i in range(1, 5)),
            publish(1, b"x" * 9000, properties=rich, frame_max=4096),
        ]
    )
    rng = random.Random(35)

    def client() -> Client:
        settings = ConnectionSettings(frame_max=4096, max_message_size=10_000, compiled=True)
        opened = Client(settings)
        opened.handshake(frame_max=4096)
        opened.open_channel(1)
        opened.received()
        assert opened.conn._scan is not None, "the connection does not use the frame scan"
        return opened

    client().send(data)
    one_at_a_time = client()
    for i in range(len(data)):
        one_at_a_time.send(data[i : i + 1])
    for _ in range(40):
        cut = client()
        at = sorted(rng.sample(range(1, len(data)), 5))
        for start, end in zip([0, *at], [*at, len(data)], strict=True):
            cut.send(data[start:end])
    for _ in range(200):
        mutated = bytearray(data[:400])
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        with contextlib.suppress(Exception):  # an error is an answer: memory errors matter
            client().send(bytes(mutated))
    for _ in range(3000):
        check(rng.randbytes(rng.randint(0, 64)))


async def pulsar(url: str, first: str, second: str) -> None:
    assert pulsar_compiled.load() is not None, "the compiled Pulsar module is not loaded"
    options = ClientOptions(service_url=url, operation_timeout_seconds=15, compiled=True)
    async with await PulsarClient.create(options) as client:
        consumer = await client.subscribe(
            first,
            "asan",
            ConsumerOptions(initial_position="earliest", receiver_queue_size=10, buffer_size=8),
        )
        await consumer.add_topic(second)
        assert consumer._listener is not None, "the consumer does not use the C listener"
        producers = [
            await client.create_producer(topic, ProducerOptions(batching_enabled=batching))
            for topic, batching in ((first, True), (second, False))
        ]
        assert all(p._compiled is not None for p in producers), "producers not compiled"
        sent = 0
        handles: list[Any] = []
        for i in range(600):
            properties = {"i": str(i), "é": "ü" * (i % 7), "": ""}
            if i % 97 == 0:
                properties["nul"] = "a\0b"  # through the binding, NUL kept as JSON
            payload = bytes(i % 251 for _ in range(i % 300))
            handles.append(await producers[i % 2].submit_grouped(payload, properties))
            sent += 1
        for handle in handles:
            await handle.durable()
        received = 0
        nacked: set[str] = set()
        with trio.fail_after(30):
            while received < sent:
                message = await consumer.receive()
                number = message.properties["i"]
                assert len(message.payload) == int(number) % 300
                _ = (message.topic, message.id_bytes, message.redelivery_count)
                if int(number) % 50 == 0 and number not in nacked:
                    nacked.add(number)
                    consumer.negative_acknowledge(message)
                    continue
                consumer.acknowledge(message)
                received += 1
        for i in range(40):  # left queued in C when the consumer closes
            await producers[0].submit_grouped(b"late %d" % i, {"i": str(i)})
        await producers[0].flush()
        await consumer.remove_topic(second)
        with trio.fail_after(10):
            await consumer.wait_buffered(8)  # the buffer full, the rest queued in C++
        for producer in producers:
            await producer.aclose()
        await consumer.aclose()


def main() -> int:
    url, first, second = sys.argv[1:4]
    frames()
    trio.run(pulsar, url, first, second)
    print("workload done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
