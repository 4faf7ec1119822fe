"""What each RabbitMQ feature costs on the publish and consume paths, measured in one run.

    .venv/bin/python bench/bench_features.py              # needs the local stack up
    .venv/bin/python bench/bench_features.py -n 3000 -r 3 --only message-ttl,priority

One gateway (a subprocess, as in bench_gateway_vs_pulsar.py, whose minimal AMQP client this
reuses) on a fresh Pulsar namespace. Each round measures a plain durable classic queue, fed
through the default exchange, and then every feature on a queue of its own, declared fresh for
the round (so a stream or a length limit starts empty) and deleted after it:

* publish: N persistent messages with publisher confirms, ``--window`` unconfirmed;
* consume: ``basic.qos`` ``--prefetch``, ``basic.consume``, one ``basic.ack`` per message.

Printed per feature: the median over rounds of its msg/s divided by the plain queue's msg/s in
the same round (the machine's speed drifts within minutes, so only ratios taken close together
mean anything), and the gateway's CPU per message (µs, median), which a busy machine disturbs
less than throughput. A feature that is configured but never triggered (a TTL longer than the
run, a dead-letter exchange nothing is rejected to, a length limit never reached, an alternate
exchange for messages that all route) shows what merely having it costs, which is what most
applications pay; the others say what they do.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pamqp import body, commands, frame, header

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gateway_vs_pulsar import (  # bench/, next to this file
    CHANNEL,
    AmqpClient,
    CpuMeter,
    amqp_consume,
    amqp_publish_confirmed,
    find_pid,
    fresh_namespace,
    gateway_process,
    load_stack,
    machine_line,
    wait_for_quiet,
)


@dataclass(frozen=True)
class Feature:
    """A queue shape and how messages reach it."""

    name: str
    queue_arguments: dict[str, Any] = field(default_factory=dict)
    # (exchange, type, arguments) declared before the queue, in order
    exchanges: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    # (destination exchange, source exchange, routing key) exchange-to-exchange bindings
    exchange_bindings: tuple[tuple[str, str, str], ...] = ()
    # the exchange the queue is bound to with its own name as the key ("" = default exchange)
    bind_to: str = ""
    # where messages are published ("" = default exchange, routing key = queue)
    publish_to: str = ""
    message_properties: dict[str, Any] = field(default_factory=dict)
    priorities: int = 0  # priorities 0..N in turn
    consume_arguments: dict[str, Any] = field(default_factory=dict)


FEATURES = (
    Feature("plain"),  # the baseline every round starts with
    Feature("quorum", {"x-queue-type": "quorum"}),
    Feature("stream", {"x-queue-type": "stream"}, consume_arguments={"x-stream-offset": "first"}),
    Feature("message-ttl", {"x-message-ttl": 3_600_000}),
    Feature("expiration", message_properties={"expiration": "3600000"}),
    Feature(
        "dead-letter",
        {"x-dead-letter-exchange": "bench.dlx"},
        exchanges=(("bench.dlx", "fanout", {}),),
    ),
    Feature("max-length", {"x-max-length": 10_000_000}),
    Feature("max-length-reject", {"x-max-length": 10_000_000, "x-overflow": "reject-publish"}),
    Feature("priority", {"x-max-priority": 10}, priorities=10),
    Feature(
        "direct-exchange",
        exchanges=(("bench.direct", "direct", {}),),
        bind_to="bench.direct",
        publish_to="bench.direct",
    ),
    Feature(
        "alternate-exchange",
        exchanges=(
            ("bench.ae", "fanout", {}),
            ("bench.with-ae", "direct", {"alternate-exchange": "bench.ae"}),
        ),
        bind_to="bench.with-ae",
        publish_to="bench.with-ae",
    ),
    Feature(
        "exchange-binding",
        exchanges=(("bench.e2e-src", "fanout", {}), ("bench.e2e-dst", "direct", {})),
        exchange_bindings=(("bench.e2e-dst", "bench.e2e-src", ""),),
        bind_to="bench.e2e-dst",
        publish_to="bench.e2e-src",
    ),
)


def message_frames(
    client: AmqpClient,
    exchange: str,
    routing_key: str,
    payload: bytes,
    properties: dict[str, Any],
) -> bytes:
    """Basic.Publish + content header (persistent, ``properties``) + body frames."""
    parts = [
        frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), CHANNEL),
        frame.marshal(
            header.ContentHeader(
                0, len(payload), commands.Basic.Properties(delivery_mode=2, **properties)
            ),
            CHANNEL,
        ),
    ]
    step = client.frame_max - 8
    parts += [
        frame.marshal(body.ContentBody(payload[at : at + step]), CHANNEL)
        for at in range(0, len(payload), step)
    ]
    return b"".join(parts)


async def declare(client: AmqpClient, feature: Feature, queue: str) -> None:
    for name, kind, arguments in feature.exchanges:
        await client.call(
            commands.Exchange.Declare(
                exchange=name, exchange_type=kind, durable=True, arguments=arguments
            ),
            commands.Exchange.DeclareOk,
        )
    for destination, source, key in feature.exchange_bindings:
        await client.call(
            commands.Exchange.Bind(destination=destination, source=source, routing_key=key),
            commands.Exchange.BindOk,
        )
    await client.call(
        commands.Queue.Declare(queue=queue, durable=True, arguments=feature.queue_arguments),
        commands.Queue.DeclareOk,
    )
    if feature.bind_to:
        await client.call(
            commands.Queue.Bind(queue=queue, exchange=feature.bind_to, routing_key=queue),
            commands.Queue.BindOk,
        )


@dataclass
class Samples:
    rate: dict[str, list[float]] = field(default_factory=dict)
    cpu_us: dict[str, list[float]] = field(default_factory=dict)

    def add(self, phase: str, count: int, seconds: float, meter: CpuMeter) -> None:
        self.rate.setdefault(phase, []).append(count / seconds)
        self.cpu_us.setdefault(phase, []).append(meter.used["gateway"] / count * 1e6)


async def measure(
    port: int, feature: Feature, args: argparse.Namespace, pids: dict[str, int]
) -> Samples:
    """One round of one feature: declare, publish, consume, delete."""
    queue = f"bench-{feature.name}-{uuid.uuid4().hex[:6]}"
    samples = Samples()
    client = await AmqpClient.open("127.0.0.1", port)
    try:
        await declare(client, feature, queue)
        await client.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        payload = b"x" * args.size
        priorities = range(feature.priorities + 1) if feature.priorities else [None]
        blobs = [
            message_frames(
                client,
                feature.publish_to,
                queue,
                payload,
                {**feature.message_properties, **({"priority": p} if p is not None else {})},
            )
            for p in priorities
        ]
        with CpuMeter(pids) as meter:
            seconds = await amqp_publish_confirmed(
                client, queue, args.count, args.size, args.window, args.phase_timeout, frames=blobs
            )
        samples.add("publish", args.count, seconds, meter)
        with CpuMeter(pids) as meter:
            seconds = await amqp_consume(
                client,
                queue,
                args.count,
                args.prefetch,
                args.phase_timeout,
                feature.consume_arguments or None,
            )
        samples.add("consume", args.count, seconds, meter)
        await client.call(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk)
    finally:
        await client.close()
    return samples


async def run(
    port: int, features: list[Feature], args: argparse.Namespace, pids: dict[str, int]
) -> dict[str, Samples]:
    results = {feature.name: Samples() for feature in features}
    await measure(port, features[0], args, pids)  # warm-up: topics, producers, JIT of Pulsar
    for rep in range(args.repeat):
        for feature in features:
            print(f"round {rep + 1}/{args.repeat}: {feature.name} ...", flush=True)
            got = await measure(port, feature, args, pids)
            for phase in ("publish", "consume"):
                results[feature.name].rate.setdefault(phase, []).extend(got.rate[phase])
                results[feature.name].cpu_us.setdefault(phase, []).extend(got.cpu_us[phase])
    return results


def report(results: dict[str, Samples], args: argparse.Namespace) -> None:
    plain = results["plain"]
    print()
    print(
        f"{args.count} messages of {args.size} B per phase, {args.repeat} rounds; "
        "ratio = feature msg/s / plain msg/s in the same round (median); CPU = gateway µs/msg"
    )
    print()
    columns = ("msg/s", "ratio", "CPU µs")
    print(
        "| feature | "
        + " | ".join(f"{p} {c}" for p in ("publish", "consume") for c in columns)
        + " |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, samples in results.items():
        cells = [name]
        for phase in ("publish", "consume"):
            rates = samples.rate[phase]
            ratios = [r / p for r, p in zip(rates, plain.rate[phase], strict=True)]
            cells += [
                f"{statistics.median(rates):,.0f}",
                f"{statistics.median(ratios):.2f}",
                f"{statistics.median(samples.cpu_us[phase]):.0f}",
            ]
        print("| " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--count", type=int, default=5_000, help="messages per phase")
    parser.add_argument("-s", "--size", type=int, default=1024, help="body bytes")
    parser.add_argument("-r", "--repeat", type=int, default=3, help="rounds")
    parser.add_argument("--window", type=int, default=500, help="unconfirmed publishes in flight")
    parser.add_argument("--prefetch", type=int, default=500, help="basic.qos prefetch count")
    parser.add_argument("--phase-timeout", type=float, default=120.0, help="seconds per phase")
    parser.add_argument(
        "--only", default="", help="comma-separated feature names (plain is always measured)"
    )
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args(argv)
    wanted = {name for name in args.only.split(",") if name}
    unknown = wanted - {feature.name for feature in FEATURES}
    if unknown:
        parser.error(f"unknown features: {', '.join(sorted(unknown))}")
    features = [f for f in FEATURES if f.name == "plain" or not wanted or f.name in wanted]

    stack = load_stack()
    if not stack.is_up():
        print("the local stack is not up: python3 scripts/stack.py up", file=sys.stderr)
        return 2
    print(f"machine: {machine_line()}")
    wait_for_quiet(args.wait_quiet)
    with (
        fresh_namespace(stack.WEB_URL, stack.ZOOKEEPER) as namespace,
        gateway_process(stack.BROKER_URL, stack.WEB_URL, stack.ZOOKEEPER, namespace) as gw,
    ):
        pids = {"gateway": gw.pid}
        pulsar_pid = find_pid("PulsarStandaloneStarter")
        if pulsar_pid:
            pids["pulsar"] = pulsar_pid
        results = asyncio.run(run(gw.port, features, args, pids))
    report(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
