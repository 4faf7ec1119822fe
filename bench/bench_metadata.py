"""Metadata store benchmark on the local stack's real ZooKeeper.

    .venv/bin/python bench/bench_metadata.py [--n 100000] [--writes 500] [--loads 3]

1. Seeds ``--n`` durable queues, each bound to one direct exchange, under a fresh prefix
   (``/starlight-rabbitmq-bench-<id>``, with ``bulk_create``: ~900 znodes per transaction).
2. Load: a fresh ``ZooKeeperMetadataStore`` opens the namespace (new session, nothing cached),
   best and median of ``--loads`` runs. This is what a replica that starts late does before it
   accepts connections.
3. Propagation: ``--writes`` queue declares, one at a time, on one store (replica A); the time
   from the start of each write until the queue is in the view of another store (replica B,
   waiting on ``changed``), in an empty namespace and in the ``--n`` namespace. Both replicas
   share this process (and its GIL), which a real fleet does not.
4. Baseline: the single-document design (one JSON znode holding a vhost's exchanges, queues and
   bindings): its load time, and the largest vhost that fits under ZooKeeper's 1 MB node limit.
5. Deletes everything it created.

Starts the local stack if it is down (and stops it at the end only then).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import random
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import trio
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gateway.metadata.mirror import make_view  # noqa: E402
from gateway.metadata.store import VhostView  # noqa: E402
from gateway.metadata.zookeeper import ZooKeeperMetadataStore  # noqa: E402
from gateway.model.entities import Binding, Exchange, ExchangeType, Queue  # noqa: E402
from gateway.server.collector import tune_collector  # noqa: E402

BIG = "public/bench-big"
SMALL = "public/bench-small"
EXCHANGE = "bench.direct"


def _stack() -> ModuleType:
    spec = importlib.util.spec_from_file_location("starlight_stack", REPO / "scripts" / "stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["starlight_stack"] = module
    spec.loader.exec_module(module)
    return module


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def queue_name(index: int) -> str:
    return f"q-{index:06d}"


# ---------------------------------------------------------------------------- per-entity


async def seed(hosts: str, prefix: str, n: int, namespace: str = BIG) -> float:
    """Seconds to create ``n`` durable queues, each bound to the direct exchange ``EXCHANGE``
    with its own name as the key, in ``namespace`` (bench_fleet.py seeds a real vhost)."""
    async with ZooKeeperMetadataStore(hosts, prefix=prefix, request_timeout=60) as store:
        queues = [Queue(queue_name(i), durable=True) for i in range(n)]
        started = time.perf_counter()
        await store.bulk_create(
            namespace,
            exchanges=[Exchange(EXCHANGE, ExchangeType.DIRECT, durable=True)],
            queues=queues,
            bindings=[Binding(q.name, EXCHANGE, q.name) for q in queues],
        )
        return time.perf_counter() - started


async def load_once(hosts: str, prefix: str, namespace: str = BIG) -> tuple[float, int, int]:
    async with ZooKeeperMetadataStore(hosts, prefix=prefix, open_timeout=600) as store:
        started = time.perf_counter()
        view = await store.open(namespace)
        elapsed = time.perf_counter() - started
        return elapsed, len(view.queues), len(view.bindings)


async def timed_probes(
    store: ZooKeeperMetadataStore,
    namespace: str,
    tag: str,
    count: int,
    lines: _Lines,
    write_times: list[float],
    seen_times: list[float],
    pause: tuple[float, float] | None = None,
) -> None:
    """Create ``count`` probe queues one at a time (after a random pause in ``pause``, in
    seconds, if given); for each, the write's time and the time until the reader process
    printed ``seen <index> <time>`` for it (the same monotonic clock)."""
    for index in range(count):
        if pause is not None:
            await trio.sleep(random.uniform(*pause))
        started = time.perf_counter()
        await store.create_queue(namespace, Queue(f"p-{tag}-{index}", durable=True))
        write_times.append(time.perf_counter() - started)
        word, seen_index, seen_at = (await lines.next()).split()
        assert word == "seen" and int(seen_index) == index
        seen_times.append(float(seen_at) - started)


class _Lines:
    """Lines from a child process's stdout."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""

    async def next(self) -> str:
        while b"\n" not in self._buffer:
            chunk = await self._stream.receive_some()
            if not chunk:
                raise EOFError("the reader process ended")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()


async def propagation(
    hosts: str, prefix: str, namespace: str, writes: int, tag: str
) -> tuple[list[float], list[float], float, float]:
    """(write latencies, write-to-visible-on-B latencies, one view rebuild on B) in seconds,
    and B's memory (MiB).

    Replica B runs in a process of its own (as in a fleet: its own GIL); CLOCK_MONOTONIC, which
    ``time.perf_counter`` reads on Linux, is one clock for every process of the machine. Each
    write waits until B has seen the previous one, so writes are timed one at a time."""
    command = [sys.executable, __file__, "--reader", hosts, prefix, namespace, tag, str(writes)]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE)
    assert process.stdout is not None
    lines = _Lines(process.stdout)
    write_times: list[float] = []
    seen_times: list[float] = []
    try:
        with trio.fail_after(600):
            assert await lines.next() == "ready"
            async with ZooKeeperMetadataStore(hosts, prefix=prefix) as a:
                await timed_probes(a, namespace, tag, writes, lines, write_times, seen_times)
            word, rebuild = (await lines.next()).split()
            assert word == "rebuild"
            word, rss = (await lines.next()).split()
            assert word == "rss"
    except BaseException:
        process.kill()  # it would wait for writes that will not come
        raise
    finally:
        with trio.CancelScope(shield=True):
            await process.wait()
    return write_times, seen_times, float(rebuild), int(rss) / 1024


async def reader(hosts: str, prefix: str, namespace: str, tag: str, count: int) -> None:
    """Replica B: report when each expected queue is in the view."""
    async with ZooKeeperMetadataStore(hosts, prefix=prefix, open_timeout=600) as store:
        view = await store.open(namespace)
        print("ready", flush=True)
        for index in range(count):
            name = f"p-{tag}-{index}"
            while name not in view.queues:
                view = await store.changed(namespace, view.version)
            print(f"seen {index} {time.perf_counter():.9f}", flush=True)
        # What the first reader of the view pays after a change: the parts of the snapshot
        # that changed are copied (a peek at the store's internals, to time that alone).
        mirror = store.mirror_of(namespace)
        assert mirror is not None
        rebuilds = []
        for _ in range(5):
            mirror._snapshot = None
            mirror._index.queues_changed = mirror._index.bindings_changed = True
            started = time.perf_counter()
            mirror.snapshot()
            rebuilds.append(time.perf_counter() - started)
        print(f"rebuild {min(rebuilds):.9f}", flush=True)
        # Current RSS (ru_maxrss would carry the parent's peak over fork + exec).
        status = Path("/proc/self/status").read_text()
        rss = next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))
        print(f"rss {rss}", flush=True)


# ---------------------------------------------------------------------------- single document


def old_document(n: int) -> bytes:
    """One vhost as one JSON document, the way the single-znode design kept it."""
    queues = {
        queue_name(i): {"durable": True, "exclusive": False, "autoDelete": False, "arguments": {}}
        for i in range(n)
    }
    bindings = [{"queue": queue_name(i), "key": queue_name(i), "arguments": {}} for i in range(n)]
    exchange = {
        "type": "direct",
        "durable": True,
        "autoDelete": False,
        "internal": False,
        "arguments": {},
        "bindings": bindings,
    }
    document = {"exchanges": {EXCHANGE: exchange}, "queues": queues}
    return json.dumps(document, separators=(",", ":")).encode()


def load_old_document(client: KazooClient, path: str) -> int:
    data, _ = client.get(path)
    return len(decode_old_document(data).queues)


def decode_old_document(data: bytes) -> VhostView:
    """The view a replica of the single-document design builds from the document."""
    document: dict[str, Any] = json.loads(data)
    queues = [
        Queue(name, q["durable"], q["exclusive"], q["autoDelete"])
        for name, q in document["queues"].items()
    ]
    exchanges = []
    bindings = []
    for name, e in document["exchanges"].items():
        exchanges.append(Exchange(name, ExchangeType(e["type"]), e["durable"], e["autoDelete"]))
        bindings += [Binding(b["queue"], name, b["key"]) for b in e["bindings"]]
    return make_view(1, exchanges, queues, bindings, ())


def fits(client: KazooClient, path: str, n: int) -> bool:
    data = old_document(n)
    try:
        client.set(path, data)
        return True
    except (ConnectionLoss, KazooException):
        # ZooKeeper drops the connection of a client that sends a packet over jute.maxbuffer.
        client.retry(client.exists, "/")
        return False


def single_document(hosts: str, prefix: str, n: int) -> dict[str, Any]:
    client = KazooClient(hosts)
    client.start(timeout=30)
    path = f"{prefix}/single-document"
    try:
        client.create(path, b"", makepath=True)
        good, bad = 0, None
        size = 1000
        while size <= n:
            if not fits(client, path, size):
                bad = size
                break
            good, size = size, size * 2
        if bad is not None:
            while bad - good > 100:
                middle = (good + bad) // 2
                if fits(client, path, middle):
                    good = middle
                else:
                    bad = middle
        largest = good
        client.set(path, old_document(largest))
        loads = []
        for _ in range(5):
            started = time.perf_counter()
            assert load_old_document(client, path) == largest
            loads.append(time.perf_counter() - started)
        return {
            "largest": largest,
            "breaks_at": bad,
            "bytes": len(old_document(largest)),
            "bytes_per_queue": len(old_document(largest)) / largest,
            "load": min(loads),
        }
    finally:
        client.delete(path)
        client.stop()
        client.close()


# ---------------------------------------------------------------------------- main


async def cleanup(hosts: str, prefix: str) -> float:
    started = time.perf_counter()
    async with ZooKeeperMetadataStore(hosts, prefix=prefix, request_timeout=60) as store:
        for namespace in (BIG, SMALL):
            await store.delete_namespace(namespace)
    client = KazooClient(hosts)
    client.start(timeout=30)
    try:
        client.delete(prefix, recursive=True)
    finally:
        client.stop()
        client.close()
    return time.perf_counter() - started


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


async def run(args: argparse.Namespace, hosts: str) -> None:
    prefix = f"/starlight-rabbitmq-bench-{uuid.uuid4().hex[:8]}"
    rows: list[tuple[str, str]] = []
    try:
        print(f"seeding {args.n} queues + {args.n} bindings under {prefix} ...", flush=True)
        seconds = await seed(hosts, prefix, args.n)
        rows.append((f"seed {args.n} queues + bindings (bulk_create)", f"{seconds:.2f} s"))

        loads = []
        for _ in range(args.loads):
            elapsed, queues, bindings = await load_once(hosts, prefix)
            assert queues == args.n and bindings == args.n, (queues, bindings)
            loads.append(elapsed)
            print(f"  load: {elapsed:.2f} s", flush=True)
        rows.append(
            (
                f"load {args.n} queues + bindings, fresh replica (best / median)",
                f"{min(loads):.2f} s / {statistics.median(loads):.2f} s",
            )
        )

        for namespace, label in ((BIG, f"{args.n}-queue vhost"), (SMALL, "empty vhost")):
            tag = "s" if namespace == SMALL else "b"
            write, seen, rebuild, rss = await propagation(
                hosts, prefix, namespace, args.writes, tag
            )
            rows.append(
                (
                    f"write latency, {label} (p50 / p99)",
                    f"{ms(percentile(write, 0.5))} / {ms(percentile(write, 0.99))}",
                )
            )
            rows.append(
                (
                    f"write -> in other replica's view, {label} (p50 / p99 / max)",
                    f"{ms(percentile(seen, 0.5))} / {ms(percentile(seen, 0.99))} / {ms(max(seen))}",
                )
            )
            rows.append((f"view rebuild after a queue and a binding change, {label}", ms(rebuild)))
            rows.append((f"memory (RSS) of the replica holding the {label}", f"{rss:.0f} MiB"))

        print("single-document baseline ...", flush=True)
        baseline = await trio.to_thread.run_sync(single_document, hosts, prefix, args.n)
        rows.append(
            (
                "single document: largest vhost that fits in one znode",
                f"{baseline['largest']} queues ({baseline['bytes'] / 1024:.0f} KiB, "
                f"{baseline['bytes_per_queue']:.0f} B/queue)",
            )
        )
        breaks = baseline["breaks_at"]
        rows.append(
            (
                "single document: write refused at",
                f"{breaks} queues" if breaks else f"not reached up to {args.n}",
            )
        )
        rows.append(
            (
                f"single document: load {baseline['largest']} queues + bindings",
                f"{baseline['load']:.3f} s",
            )
        )
    finally:
        print("cleaning up ...", flush=True)
        seconds = await cleanup(hosts, prefix)
        rows.append(("delete everything (delete_namespace)", f"{seconds:.2f} s"))

    width = max(len(name) for name, _ in rows)
    print()
    print(f"{'metadata benchmark':<{width}}  result")
    print(f"{'-' * width}  {'-' * 30}")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def main() -> None:
    if sys.argv[1:2] == ["--reader"]:
        hosts, prefix, namespace, tag, count = sys.argv[2:7]
        tune_collector()  # the reader stands for a replica: the collector set as a gateway's
        trio.run(reader, hosts, prefix, namespace, tag, int(count))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="queues (each with a binding)")
    parser.add_argument("--writes", type=int, default=500, help="writes timed for propagation")
    parser.add_argument("--loads", type=int, default=3, help="fresh loads timed")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # The single-document probe drops connections on purpose; kazoo would warn each time.
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    stack = _stack()
    started_here = stack.ensure_up()
    try:
        trio.run(run, args, stack.ZOOKEEPER)
    finally:
        if started_here:
            stack.down()


if __name__ == "__main__":
    main()
