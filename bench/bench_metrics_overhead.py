"""What the metrics cost: the gateway with and without them, measured in one run.

    .venv/bin/python bench/bench_metrics_overhead.py               # needs the local stack up
    .venv/bin/python bench/bench_metrics_overhead.py -n 5000 --repeat 3

Three gateways on the same Pulsar, each in a fresh namespace, driven by the same minimal AMQP
client as bench_gateway_vs_pulsar.py (publish N messages of 1 KiB with confirms, window 500;
then consume them with prefetch 500, one ack each):

* **baseline**: the gateway's code before metrics existed (``--baseline-ref``, default the
  commit before the observability work, extracted with ``git archive`` into a temporary
  directory and run with the same virtualenv): no counting at all;
* **counting**: this checkout with ``metricsListener`` empty and usage events off: only the
  plain-int counting of the hot paths;
* **scraped**: this checkout as deployed: the endpoint on, scraped every second by a thread of
  this script (Prometheus scrapes every 15-60 s: far heavier than real), usage events every
  10 s.

The variants' rounds alternate (baseline, counting, scraped, baseline, ...), so that machine
noise hits them alike; printed are each round's rates, each variant's median, and the median
ratio to the baseline of the same round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from pamqp import commands

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

from bench_gateway_vs_pulsar import (  # noqa: E402
    AmqpClient,
    amqp_consume,
    amqp_publish_confirmed,
    fresh_namespace,
    load_stack,
    proc_cpu_seconds,
)
from server_process import free_port, port_open, start_logged, stop, wait_ready  # noqa: E402

PYTHON = REPO_DIR / ".venv" / "bin" / "python"
BASELINE_REF = "75a0d88"


@dataclass
class Variant:
    name: str
    extra_config: str
    pythonpath: str | None = None
    scrape: bool = False


@contextlib.contextmanager
def gateway(
    variant: Variant, urls: tuple[str, str, str], namespace: str, workdir: Path
) -> Iterator[tuple[int, int | None, int]]:
    """(AMQP port, metrics port or None, pid) of a running gateway of ``variant``."""
    broker_url, web_url, zookeeper = urls
    port = free_port()
    metrics = free_port() if variant.scrape else None
    conf = workdir / f"{variant.name}.conf"
    conf.write_text(
        f"brokerServiceURL={broker_url}\nbrokerWebServiceURL={web_url}\n"
        f"configurationStoreServers={zookeeper}\namqpListeners=amqp://127.0.0.1:{port}\n"
        f"amqpDefaultNamespace={namespace}\n"
        + (f"metricsListener=http://127.0.0.1:{metrics}\n" if metrics else "")
        + variant.extra_config
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARLIGHT_")}
    if variant.pythonpath:
        env["PYTHONPATH"] = variant.pythonpath
    log = workdir / f"{variant.name}.log"
    command = [str(PYTHON), "-m", "gateway.cli", "-c", str(conf)]
    proc = start_logged(command, log, cwd=workdir, env=env, new_session=False)
    try:
        wait_ready(proc, lambda: port_open(port), log=log, what=variant.name, timeout=60)
        yield port, metrics, proc.pid
    finally:
        stop(proc, signal.SIGINT)  # the gateway's graceful stop


class Scraper:
    """GET /metrics every second until stopped (heavier than any real Prometheus)."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._stop = threading.Event()
        self.scrapes = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.wait(1.0):
                client.get(f"http://127.0.0.1:{self._port}/metrics").raise_for_status()
                self.scrapes += 1

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


async def one_round(port: int, queue: str, args: argparse.Namespace) -> tuple[float, float]:
    client = await AmqpClient.open("127.0.0.1", port)
    try:
        await client.call(
            commands.Queue.Declare(queue=queue, durable=True), commands.Queue.DeclareOk
        )
        await client.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        published = await amqp_publish_confirmed(
            client, queue, args.count, args.size, args.window, args.timeout
        )
        consumed = await amqp_consume(client, queue, args.count, args.prefetch, args.timeout)
    finally:
        await client.close()
    return args.count / published, args.count / consumed


def counting_cost_ns(repeat: int = 200_000) -> float:
    """Nanoseconds of the counting one message costs on its way through a gateway: the
    statements the publish (confirm channel, routed), deliver (manual ack) and ack paths add,
    run on a real VhostCounters; measured without the machine noise of the end-to-end rounds."""
    from gateway.observability.counters import ProcessCounters

    process = ProcessCounters()
    counts = process.vhost("/")
    sizes = process.message_sizes
    size = 1024

    def one_message() -> None:
        # publish (publishing.publish_now)
        counts.received += 1
        counts.received_bytes += size
        sizes.observe(size)
        counts.routed += 1
        counts.routed_bytes += size
        counts.received_confirm += 1
        # confirm (one frame per message, the worst case)
        counts.confirmed += 1
        # deliver (consuming._deliver)
        counts.delivered_bytes += size
        counts.delivered_consume_manual_ack += 1
        # ack (acknowledgements.ack_now)
        counts.acknowledged += 1
        counts.acknowledged_bytes += size

    def nothing() -> None:
        pass

    def best(function: object) -> float:
        import timeit

        return min(timeit.repeat(function, number=repeat, repeat=5)) / repeat * 1e9  # type: ignore[arg-type]

    return best(one_message) - best(nothing)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-n", "--count", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=500)
    parser.add_argument("--prefetch", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    args = parser.parse_args()

    stack = load_stack()
    endpoints = stack.Endpoints()
    broker_url, web_url, zookeeper = endpoints.broker_url, endpoints.web_url, endpoints.zookeeper
    urls = (broker_url, web_url, zookeeper)

    workdir = Path(tempfile.mkdtemp(prefix="bench-metrics-"))
    baseline_src = workdir / "baseline"
    baseline_src.mkdir()
    archive = subprocess.run(
        ["git", "archive", args.baseline_ref, "gateway"],
        cwd=REPO_DIR,
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(baseline_src)], input=archive, check=True)
    variants = [
        Variant("baseline", "", pythonpath=str(baseline_src)),
        Variant("counting", "metricsListener=\nusageEventsEnabled=false\n"),
        Variant("scraped", "usageEventsIntervalSeconds=10\n", scrape=True),
    ]
    rates: dict[str, list[tuple[float, float]]] = {v.name: [] for v in variants}
    cpu: dict[str, list[float]] = {v.name: [] for v in variants}
    try:
        with contextlib.ExitStack() as stack_:
            running = {}
            for variant in variants:
                namespace = stack_.enter_context(fresh_namespace(web_url, zookeeper))
                running[variant.name] = stack_.enter_context(
                    gateway(variant, urls, namespace, workdir)
                )
            queues = {v.name: f"overhead-{uuid.uuid4().hex[:6]}" for v in variants}
            # Warm-up: every variant's queue, producer and consumer exist before timing.
            for variant in variants:
                port, _, _ = running[variant.name]
                asyncio.run(
                    one_round(
                        port,
                        queues[variant.name],
                        argparse.Namespace(**{**vars(args), "count": min(2000, args.count)}),
                    )
                )
            for rep in range(args.repeat):
                for variant in variants:
                    port, metrics, pid = running[variant.name]
                    scraper = Scraper(metrics) if metrics else contextlib.nullcontext()
                    cpu_before = proc_cpu_seconds(pid)
                    with scraper:
                        result = asyncio.run(one_round(port, queues[variant.name], args))
                    # The gateway's CPU per message (publish + deliver + ack): less sensitive
                    # to a busy machine than the rates.
                    cpu_us = (proc_cpu_seconds(pid) - cpu_before) / args.count * 1e6
                    rates[variant.name].append(result)
                    cpu[variant.name].append(cpu_us)
                    print(
                        f"round {rep + 1} {variant.name:9} publish {result[0]:8.0f}/s  "
                        f"consume {result[1]:8.0f}/s  gateway CPU {cpu_us:6.1f} us/message",
                        flush=True,
                    )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\n{args.count} messages of {args.size} B per round, {args.repeat} rounds each")
    counting = counting_cost_ns()
    base_cpu = statistics.median(cpu["baseline"]) * 1000
    print(
        f"counting alone: {counting:.0f} ns per message (publish+confirm+deliver+ack), "
        f"{counting / base_cpu:.2%} of the baseline gateway's {base_cpu / 1000:.1f} us CPU "
        "per message"
    )
    base = rates["baseline"]
    for name, values in rates.items():
        publish = statistics.median(v[0] for v in values)
        consume = statistics.median(v[1] for v in values)
        line = f"{name:9} median publish {publish:8.0f}/s  consume {consume:8.0f}/s"
        line += f"  CPU {statistics.median(cpu[name]):6.1f} us/message"
        if name != "baseline":
            cpu_ratio = statistics.median(
                v / b for v, b in zip(cpu[name], cpu["baseline"], strict=True)
            )
            line += f"  CPU ratio {cpu_ratio:.3f}"
            p_ratio = statistics.median(v[0] / b[0] for v, b in zip(values, base, strict=True))
            c_ratio = statistics.median(v[1] / b[1] for v, b in zip(values, base, strict=True))
            line += (
                f"   vs baseline (median of rounds): publish {p_ratio:.3f}  consume {c_ratio:.3f}"
            )
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
