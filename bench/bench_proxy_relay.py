"""The Pulsar proxy extension's relay against the gateway reached directly, in one run.

    .venv/bin/python bench/bench_proxy_relay.py          # needs the local stack and `make shim`
    .venv/bin/python bench/bench_proxy_relay.py -n 5000 --repeat 3

Two real Pulsar proxies with the extension (scripts/pulsar_proxy.py), on free ports, in one fresh
Pulsar namespace:

* **relay**: ``amqpProxyMode=relay`` (the default): the client talks to the proxy's Netty, which
  relays every byte to the gateway over a Unix socket after a PROXY v2 header;
* **direct**: ``amqpProxyMode=direct``: the gateway binds the AMQP port itself, so the client talks
  straight to it (the same as a standalone gateway).

The work is bench_gateway_vs_pulsar.py's AMQP client and phases: N persistent 1 KiB messages
published to a durable queue with publisher confirms (at most W unconfirmed), timed until the last
confirm; then basic.consume with prefetch P, one ack per message, timed to the last ack. Rounds
alternate relay and direct; the report gives each round's relay/direct ratio and the median.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import signal
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

from pamqp import commands

REPO = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bench = _load("bench_gateway_vs_pulsar", REPO / "bench" / "bench_gateway_vs_pulsar.py")
pulsar_proxy = _load("pulsar_proxy", REPO / "scripts" / "pulsar_proxy.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Proxy:
    def __init__(self, directory: Path, mode: str, stack: Any, namespace: str) -> None:
        self.mode = mode
        self.amqp_port = free_port()
        conf = pulsar_proxy.write_proxy_conf(
            directory,
            nar=pulsar_proxy.nar_path(),
            broker_url=stack.broker_url,
            web_url=stack.web_url,
            zookeeper=stack.zookeeper,
            service_port=free_port(),
            web_port=free_port(),
            amqp_port=self.amqp_port,
            extra={
                "amqpGatewayCommand": str(Path(sys.executable).parent / "starlight-rabbitmq"),
                "amqpProxyMode": mode,
                "amqpDefaultNamespace": namespace,
            },
        )
        self.log = directory / "proxy.log"
        self.process = pulsar_proxy.start_proxy(conf, self.log)

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while True:
            text = self.log.read_text(errors="replace") if self.log.exists() else ""
            bound = "Successfully bound extension" in text or self.mode == "direct"
            if bound and "is ready" in text:
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{self.mode} proxy did not start; see {self.log}")
            time.sleep(0.2)  # polling a log file for a condition, with a deadline

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(60)


async def one_round(port: int, queue: str, args: argparse.Namespace) -> tuple[float, float]:
    client = await bench.AmqpClient.open("127.0.0.1", port)
    try:
        await client.call(
            commands.Queue.Declare(queue=queue, durable=True), commands.Queue.DeclareOk
        )
        await client.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        seconds = await bench.amqp_publish_confirmed(
            client, queue, args.count, args.size, args.window, args.phase_timeout
        )
        publish = args.count / seconds
        seconds = await bench.amqp_consume(
            client, queue, args.count, args.prefetch, args.phase_timeout
        )
        return publish, args.count / seconds
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-n", "--count", type=int, default=5000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=500)
    parser.add_argument("--prefetch", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--phase-timeout", type=float, default=120.0)
    args = parser.parse_args(argv)

    stack = bench.load_stack()
    stack.ensure_up()
    endpoints = stack.DEFAULT.endpoints
    results: dict[str, list[tuple[float, float]]] = {"relay": [], "direct": []}
    with (
        bench.fresh_namespace(endpoints.web_url, endpoints.zookeeper) as namespace,
        tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp,
    ):
        proxies = {
            mode: Proxy(Path(tmp) / mode, mode, endpoints, namespace)
            for mode in ("relay", "direct")
        }
        try:
            for proxy in proxies.values():
                proxy.wait_ready()
            queue = f"bench-{uuid.uuid4().hex[:8]}"
            # Warm-up on each path (producers, consumers, JIT), unmeasured.
            for proxy in proxies.values():
                asyncio.run(
                    one_round(
                        proxy.amqp_port, queue, argparse.Namespace(**{**vars(args), "count": 500})
                    )
                )
            for rep in range(args.repeat):
                for mode, proxy in proxies.items():
                    results[mode].append(asyncio.run(one_round(proxy.amqp_port, queue, args)))
                    publish, consume = results[mode][-1]
                    print(
                        f"round {rep + 1} {mode:6}: publish {publish:8.0f} msg/s  "
                        f"consume {consume:8.0f} msg/s"
                    )
        finally:
            for proxy in proxies.values():
                proxy.stop()

    print()
    print(f"{args.count} x {args.size} B, confirms window {args.window}, prefetch {args.prefetch}")
    for index, phase in enumerate(("publish", "consume")):
        ratios = [
            r[index] / d[index] for r, d in zip(results["relay"], results["direct"], strict=True)
        ]
        best_relay = max(r[index] for r in results["relay"])
        best_direct = max(d[index] for d in results["direct"])
        print(
            f"{phase:8}: relay {best_relay:8.0f} msg/s, direct {best_direct:8.0f} msg/s (best); "
            f"relay/direct per round {', '.join(f'{x:.2f}' for x in ratios)}; "
            f"median {statistics.median(ratios):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
