"""Receiving from pulsar-client into trio: a message listener against asking (``receive_async``).

The gateway's TrioConsumer uses a ``message_listener``, which pulsar-client calls on its own
listener thread once per message; asking for each message with ``receive_async`` instead,
which pulsar-client answers on the calling (trio) thread when its receiver queue holds one,
was tried and reverted (docs/benchmarks.md, "A listener, not asking"). This measures the
two shapes alone, without the gateway: N messages of 1 KiB are published to a fresh topic
of ``public/default`` on the local stack, then each mode reads them all from a new Shared
subscription (receiver queue 1,000), reading the properties and payload of each message and
acknowledging it (``acknowledge_async``), as the gateway does. Printed per mode and round:
process CPU per message (all threads) and msg/s. Needs the local stack up
(``python3 scripts/stack.py up``); the topic is left behind in ``public/default`` (a few MiB).

    .venv/bin/python bench/bench_pulsar_receive.py -n 20000 --rounds 2
"""

from __future__ import annotations

import argparse
import collections
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import _pulsar
import pulsar
import trio

BROKER = "pulsar://127.0.0.1:6650"
BUFFER = 500  # the trio-side bound, as the gateway's for a prefetch of 500


def _noop(_result: Any) -> None:
    pass


def _subscribe(native_client: Any, topic: str, listener: Callable[..., None] | None) -> Any:
    conf = _pulsar.ConsumerConfiguration()
    conf.consumer_type(_pulsar.ConsumerType.Shared)
    conf.subscription_initial_position(_pulsar.InitialPosition.Earliest)
    conf.receiver_queue_size(1000)
    if listener is not None:
        conf.message_listener(listener)
    return native_client.subscribe(topic, f"bench-{uuid.uuid4().hex[:8]}", conf)


def _report(mode: str, count: int, cpu: float, wall: float) -> None:
    print(f"{mode:9} {1e6 * cpu / count:6.1f} µs CPU/msg  {count / wall:8,.0f} msg/s", flush=True)


async def listener_mode(native_client: Any, topic: str, count: int) -> None:
    """The listener appends to a deque and wakes trio (coalesced), as TrioConsumer did."""
    buffer: collections.deque[tuple[Any, Any]] = collections.deque()
    lock = threading.Lock()
    token = trio.lowlevel.current_trio_token()
    lot = trio.lowlevel.ParkingLot()
    scheduled = [False]

    def wake() -> None:
        scheduled[0] = False
        lot.unpark_all()

    def on_message(consumer: Any, message: Any) -> None:
        with lock:
            buffer.append((consumer, message))
        if not scheduled[0]:
            scheduled[0] = True
            token.run_sync_soon(wake)

    cpu, wall = time.process_time(), time.perf_counter()
    native = _subscribe(native_client, topic, on_message)
    for n in range(1, count + 1):
        while not buffer:
            await lot.park()
        with lock:
            consumer, message = buffer.popleft()
        message.properties()
        message.data()
        consumer.acknowledge_async(message, _noop)
        if n % 16 == 0:
            await trio.lowlevel.checkpoint()
    _report("listener", count, time.process_time() - cpu, time.perf_counter() - wall)
    native.close()


async def asking_mode(native_client: Any, topic: str, count: int) -> None:
    """One request at a time, asked again as long as the buffer has room."""
    buffer: collections.deque[Any] = collections.deque()
    token = trio.lowlevel.current_trio_token()
    lot = trio.lowlevel.ParkingLot()
    trio_thread = threading.get_ident()
    pending = [False]

    def answered(result: Any, message: Any) -> None:
        pending[0] = False
        if result == _pulsar.Result.Ok:
            buffer.append(message)
        if threading.get_ident() != trio_thread:
            token.run_sync_soon(lot.unpark_all)

    cpu, wall = time.process_time(), time.perf_counter()
    native = _subscribe(native_client, topic, None)

    def ask() -> None:
        while not pending[0] and len(buffer) < BUFFER:
            pending[0] = True
            native.receive_async(answered)

    for n in range(1, count + 1):
        ask()
        while not buffer:
            await lot.park()
            ask()
        message = buffer.popleft()
        message.properties()
        message.data()
        native.acknowledge_async(message, _noop)
        if n % 16 == 0:
            await trio.lowlevel.checkpoint()
    _report("asking", count, time.process_time() - cpu, time.perf_counter() - wall)
    native.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--count", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    client = pulsar.Client(BROKER, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    topic = f"persistent://public/default/bench-receive-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
    properties = {"amqp-exchange": "", "amqp-routing-key": "q"}
    for _ in range(args.count):
        producer.send_async(b"x" * 1024, None, properties=properties)
    producer.flush()
    native_client = client._client
    for _ in range(args.rounds):
        for mode in (listener_mode, asking_mode):
            trio.run(mode, native_client, topic, args.count)
    client.close()


if __name__ == "__main__":
    main()
