"""How publish + consume throughput scales with ``--workers N`` for many client connections.

    .venv/bin/python bench/bench_workers.py                   # needs the local stack up
    .venv/bin/python bench/bench_workers.py --workers 1,2 --connections 8 --seconds 5

One gateway (``starlight-rabbitmq --workers N``, a subprocess as in bench_gateway_vs_pulsar.py,
whose minimal AMQP client this reuses) on a fresh Pulsar namespace, for each N of
``--workers``; for each C of ``--connections``, C client connections in C/2 pairs, each pair a
durable queue of its own (fed through the default exchange): one connection publishes 1 KiB
persistent messages with publisher confirms, keeping ``--window`` unconfirmed, the other
consumes them with ``basic.qos`` ``--prefetch`` and one ``basic.ack`` per message. The kernel
spreads the connections over the workers (SO_REUSEPORT), so a pair's two ends usually land on
different workers: the fleet's metadata (ZooKeeper) is what lets a consumer on one worker read
what a publisher on another wrote.

The pairs run in ``--client-procs`` client processes (each an asyncio loop), started together
behind a barrier; after ``--warmup`` seconds the confirmed publishes and the deliveries of
``--seconds`` are counted. Printed per (N, C): confirmed publishes/s, deliveries/s, the
deliveries' ratio to N = 1 at the same C, and CPU seconds per process group (the gateway's
supervisor and workers, the Pulsar JVM, the clients, everything else) over the counted window,
with the gateway's CPU per message (one published plus one delivered).

On the 2-core development machine the clients and Pulsar share the cores with the workers, so
more than two workers cannot add throughput there; the method is what holds on a bigger
machine (give it ``--workers 1,2,4,8`` and enough client processes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from pamqp import commands

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gateway_vs_pulsar import (  # bench/, next to this file
    AmqpClient,
    CpuMeter,
    find_pid,
    fresh_namespace,
    gateway_pids,
    gateway_process,
    load_stack,
    machine_line,
    wait_for_quiet,
)


@dataclass(frozen=True)
class PairSettings:
    port: int
    size: int
    window: int
    prefetch: int
    warmup: float
    seconds: float


@dataclass(frozen=True)
class Counted:
    """What one client process counted in the measured window."""

    confirmed: int
    delivered: int
    cpu_seconds: float


# --- the client processes ----------------------------------------------------------------------


class Pair:
    """A publisher connection and a consumer connection on one queue."""

    def __init__(self, queue: str, publisher: AmqpClient, consumer: AmqpClient) -> None:
        self.queue = queue
        self.publisher = publisher
        self.consumer = consumer
        self.delivered = 0

    @classmethod
    async def open(cls, queue: str, settings: PairSettings) -> Pair:
        publisher = await AmqpClient.open("127.0.0.1", settings.port)
        consumer = await AmqpClient.open("127.0.0.1", settings.port)
        pair = cls(queue, publisher, consumer)
        await publisher.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        await consumer.call(
            commands.Basic.Qos(prefetch_count=settings.prefetch), commands.Basic.QosOk
        )
        consumer.on_delivery = pair._on_delivery
        await consumer.call(
            commands.Basic.Consume(queue=queue, consumer_tag="bench"), commands.Basic.ConsumeOk
        )
        return pair

    def _on_delivery(self, tag: int, _head: bytes) -> None:
        self.delivered += 1
        self.consumer.ack(tag)

    async def publish_until(self, stop: asyncio.Event, settings: PairSettings) -> None:
        client = self.publisher
        blob = client.message_frames(self.queue, b"x" * settings.size)
        sent = 0
        while not stop.is_set():
            room = settings.window - (sent - client.confirmed)
            if room <= 0:
                client.confirm_event.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(client.confirm_event.wait(), 1.0)
                continue
            chunk = min(room, 32)
            client.write(blob * chunk)
            sent += chunk
            if not client.can_write.is_set():
                await client.can_write.wait()
            else:
                await asyncio.sleep(0)

    async def close(self) -> None:
        await self.publisher.close()
        await self.consumer.close()


async def run_pairs(queues: list[str], settings: PairSettings, barrier: Barrier) -> Counted:
    pairs = [await Pair.open(queue, settings) for queue in queues]
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, barrier.wait)
    stop = asyncio.Event()
    publishing = [asyncio.create_task(pair.publish_until(stop, settings)) for pair in pairs]

    def totals() -> tuple[int, int]:
        return (
            sum(pair.publisher.confirmed for pair in pairs),
            sum(pair.delivered for pair in pairs),
        )

    await asyncio.sleep(settings.warmup)
    confirmed0, delivered0 = totals()
    cpu0 = time.process_time()
    await asyncio.sleep(settings.seconds)
    confirmed1, delivered1 = totals()
    cpu1 = time.process_time()
    stop.set()
    await asyncio.gather(*publishing)
    for pair in pairs:
        lost = pair.publisher.lost or pair.consumer.lost
        if lost is not None:
            raise RuntimeError(f"queue {pair.queue}: connection lost: {lost}")
        if pair.publisher.nacked:
            raise RuntimeError(f"queue {pair.queue}: {pair.publisher.nacked} publishes nacked")
    for pair in pairs:
        await pair.close()
    return Counted(confirmed1 - confirmed0, delivered1 - delivered0, cpu1 - cpu0)


def client_process(
    queues: list[str], settings: PairSettings, barrier: Barrier, results: Any
) -> None:
    try:
        results.put(asyncio.run(run_pairs(queues, settings, barrier)))
    except BaseException as error:  # reported by the parent, which is waiting for a result
        barrier.abort()
        results.put(f"{type(error).__name__}: {error}")


# --- the parent --------------------------------------------------------------------------------


def wait_workers_ready(log: Path, workers: int, timeout: float = 120.0) -> None:
    """Until the supervisor logs that every worker is ready (a single process is ready once it
    listens, which gateway_process waited for)."""
    if workers == 1:
        return
    deadline = time.monotonic() + timeout
    while f"all {workers} workers ready" not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{workers} workers not ready within {timeout:.0f} s")
        time.sleep(0.2)


async def declare(port: int, queues: list[str], *, delete: bool = False) -> None:
    client = await AmqpClient.open("127.0.0.1", port)
    try:
        for queue in queues:
            if delete:
                await client.call(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk)
            else:
                await client.call(
                    commands.Queue.Declare(queue=queue, durable=True), commands.Queue.DeclareOk
                )
    finally:
        await client.close()


@dataclass
class Row:
    workers: int
    connections: int
    published: float
    delivered: float
    meter: CpuMeter

    def gateway_cpu(self) -> float:
        used = self.meter.used
        return sum(v for k, v in used.items() if k == "gateway" or k.startswith("worker"))


def measure(port: int, pids: dict[str, int], workers: int, connections: int, args: Any) -> Row:
    queues = [f"w{workers}-c{connections}-{i}" for i in range(connections // 2)]
    asyncio.run(declare(port, queues))
    settings = PairSettings(port, args.size, args.window, args.prefetch, args.warmup, args.seconds)
    procs = min(args.client_procs, len(queues))
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(procs + 1)
    results = context.Queue()
    shares = [queues[i::procs] for i in range(procs)]
    started = [
        context.Process(target=client_process, args=(share, settings, barrier, results))
        for share in shares
    ]
    for process in started:
        process.start()
    try:
        barrier.wait(timeout=120)
        time.sleep(args.warmup)  # the clients count from here too (they passed the barrier)
        with CpuMeter(pids) as meter:
            time.sleep(args.seconds)
        counted = [results.get(timeout=120) for _ in started]
    finally:
        for process in started:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
    failures = [c for c in counted if isinstance(c, str)]
    if failures:
        raise RuntimeError(f"client process failed: {failures[0]}")
    # The client processes' CPU is not this process's: count it apart from "other".
    client_cpu = sum(c.cpu_seconds for c in counted)
    meter.used["client"] = client_cpu
    meter.used["other"] = max(0.0, meter.used["other"] - client_cpu)
    asyncio.run(declare(port, queues, delete=True))
    return Row(
        workers,
        connections,
        sum(c.confirmed for c in counted) / args.seconds,
        sum(c.delivered for c in counted) / args.seconds,
        meter,
    )


@contextlib.contextmanager
def gateway(stack: Any, namespace: str, workers: int) -> Iterator[tuple[int, dict[str, int]]]:
    with gateway_process(
        stack.BROKER_URL,
        stack.WEB_URL,
        stack.ZOOKEEPER,
        namespace,
        extra_args=["--workers", str(workers)] if workers > 1 else [],
    ) as gw:
        wait_workers_ready(gw.log, workers)
        pids = gateway_pids(gw.pid)
        pulsar = find_pid("PulsarStandaloneStarter")
        if pulsar:
            pids["pulsar"] = pulsar
        yield gw.port, pids


def report(rows: list[Row], args: Any) -> None:
    print()
    print(
        f"{args.size} B persistent messages, window {args.window}, prefetch {args.prefetch}, "
        f"{args.seconds:g} s counted after {args.warmup:g} s, {args.client_procs} client "
        "processes; CPU in cores (CPU s / wall s); gateway µs = its CPU per published + "
        "delivered message"
    )
    print()
    print(
        "| workers | connections | published msg/s | delivered msg/s | delivered vs 1 worker "
        "| gateway µs/msg | gateway cores | pulsar cores | client cores | other cores |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    base = {row.connections: row.delivered for row in rows if row.workers == 1}
    for row in rows:
        wall = row.meter.wall or args.seconds
        versus = row.delivered / base[row.connections] if base.get(row.connections) else None
        moved = row.published + row.delivered
        cpu_us = row.gateway_cpu() / (moved * args.seconds) * 1e6 * 2 if moved else 0.0
        print(
            f"| {row.workers} | {row.connections} | {row.published:,.0f} | {row.delivered:,.0f} "
            f"| {f'{versus:.2f}' if versus is not None else '-'} | {cpu_us:.0f} "
            f"| {row.gateway_cpu() / wall:.2f} | {row.meter.used.get('pulsar', 0.0) / wall:.2f} "
            f"| {row.meter.used['client'] / wall:.2f} | {row.meter.used['other'] / wall:.2f} |"
        )


def parse_counts(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of counts: {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=parse_counts, default=[1, 2, 4])
    parser.add_argument(
        "--connections", type=parse_counts, default=[8, 16, 32], help="client connections (even)"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="counted seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="uncounted seconds first")
    parser.add_argument("-s", "--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--window", type=int, default=100, help="unconfirmed per publisher")
    parser.add_argument("--prefetch", type=int, default=100, help="basic.qos per consumer")
    parser.add_argument("--client-procs", type=int, default=2, help="client processes")
    parser.add_argument("--repeat", type=int, default=1, help="rounds over every (N, C)")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args(argv)
    if any(c % 2 or c < 2 for c in args.connections):
        parser.error("--connections: each count must be even (publisher + consumer pairs)")

    stack = load_stack()
    if not stack.is_up():
        print("the local stack is not up: python3 scripts/stack.py up", file=sys.stderr)
        return 2
    print(f"machine: {machine_line()}")
    wait_for_quiet(args.wait_quiet)
    rows: list[Row] = []
    with fresh_namespace(stack.WEB_URL, stack.ZOOKEEPER) as namespace:
        for rep in range(args.repeat):
            for workers in args.workers:
                with gateway(stack, namespace, workers) as (port, pids):
                    for connections in args.connections:
                        print(
                            f"round {rep + 1}: {workers} worker(s), {connections} connections ...",
                            flush=True,
                        )
                        rows.append(measure(port, pids, workers, connections, args))
    if args.repeat > 1:
        rows = medians(rows)
    report(rows, args)
    return 0


def medians(rows: list[Row]) -> list[Row]:
    """One row per (N, C): the round with the median deliveries/s."""
    by_key: dict[tuple[int, int], list[Row]] = {}
    for row in rows:
        by_key.setdefault((row.workers, row.connections), []).append(row)
    picked = []
    for group in by_key.values():
        middle = statistics.median_low([row.delivered for row in group])
        picked.append(next(row for row in group if row.delivered == middle))
    return picked


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
