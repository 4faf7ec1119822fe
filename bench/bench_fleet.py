"""The fleet, measured through real gateway processes with a real AMQP client (issue 5).

    .venv/bin/python bench/bench_fleet.py            # default sizes, ~11 min on 2 cores
    .venv/bin/python bench/bench_fleet.py --quick    # smaller sizes, ~2 min

Needs the local stack up (``python3 scripts/stack.py up``); it is used as found, never stopped.
Every gateway is a ``python -m gateway.cli -c <conf>`` process of its own, on a port of its own
(tests/support/gateway_process.py starts it), all on one fresh Pulsar namespace of the
stack and one **private ZooKeeper** for their metadata: a ZooKeeper 3.9.4 server started here
from the stack's own jars (``ZooKeeperServerMain``, fsync off like the stack's, its own heap
``--zookeeper-heap``, its garbage collector ``--zookeeper-gc``: ZGC), removed at the end. Not
the stack's ZooKeeper: it lives inside the Pulsar JVM, whose 1 GB heap is shared by everyone
using the stack, and ZooKeeper keeps its last 500 transactions in memory: this benchmark's
single-document rewrites (~1 MB each) and its 100,000-queue vhost (400,000 znodes) once ran
that JVM out of heap and took the shared stack down. A private server also keeps the replicas
from loading other runs' vhosts. Each phase is bounded (``--phase-timeout``,
``--load-timeout``) and preceded by a line with the machine's load (load average, and the cores
busy over ``--load-sample`` seconds).

1. **declare+bind ops/s through the fleet.** AMQP connections spread round-robin over the
   replicas, each doing ``queue.declare`` (durable, a queue of its own) + ``queue.bind`` (to one
   durable direct exchange, the queue's name as the key) back to back, for ``--seconds`` (15)
   or ``--ops`` (4000) operations in all, whichever comes first, after ``--warmup`` (5)
   unmeasured ones per connection. An op is the pair; ops/s = ops / time from the start to
   the last Bind-Ok; the latency is the pair's. First the previous design, on a namespace and
   a replica of its own with ``amqpLazySubscriptions=false`` and ``--eager-connections`` (6):
   each declare subscribes the queue to its default-exchange topic and each bind to a new
   key's topic, so an op creates two Pulsar topics with a subscription each, besides its two
   ZooKeeper transactions. Then lazy subscriptions (the default: no Pulsar work until a
   message is published to the key, docs/fleet.md) with ``--connections`` (48), through 1
   replica, then through 3 (the 2 others started meanwhile). The queues are deleted
   afterwards (timed apart). Before it (and the churn), unmeasured: declare+bind+delete and
   churn cycles through replica 1 until the private ZooKeeper's JIT compiler is quiet (at most
   ``--zookeeper-warmup``, 60 s; ``warm_zookeeper``): a fleet's ZooKeeper has been running
   for days, this one starts with the run. ``--replica-workers N`` runs replica 1 as one
   ``--workers N`` gateway (its workers' CPU counted as the replica's).
1b. **Queue churn** (between the two lazy runs, through replica 1): ``--churn-connections``
   (16) connections each repeating for ``--churn-seconds`` (60): declare a server-named
   exclusive queue, consume it, every ``--churn-reply-every`` (4th) cycle publish a reply to it
   and wait for its delivery, cancel, delete. Printed: cycles/s and the cycle's p50 / p99; the
   vhost's topics with subscriptions, its subscriptions and znodes (bucket nodes left out)
   before and after, and how long until they were equal again (the leader sweeps the keys of
   deleted queues in its rounds; ``--churn-settle`` bounds the wait); the replica's RSS.
2. **Bind-Ok on A -> in force on B.** ``--rounds`` (200) rounds per exchange type, after 5
   unmeasured: on replica A a fresh queue is declared and bound; the moment Bind-Ok is read,
   replica B (publisher confirms on) publishes with ``mandatory=true`` to that exchange and key
   until a publish is confirmed without a Basic.Return before it (the gateway sends the Return
   before the confirm of the same message). Figure: time from reading Bind-Ok to *sending* the
   first publish that was routed (both clients in this process, one monotonic clock). Probes
   are sent every ``--probe-interval`` (1 ms) without waiting for confirms, so the resolution
   is about that interval, not a Pulsar round trip; the gap between the last returned and the
   first routed probe is printed, and so is the time to that probe's confirm.

   * direct: bind key ``d<round>``; B published one message to that key before the bind (not
     timed), so B's Pulsar producer exists and only the routing decision is measured;
   * topic: bind pattern ``k<round>.*``, publish ``k<round>.p``, a key nobody used: B's first
     publish registers the key in ZooKeeper and creates its topic and producer, so that first
     probe is sent alone and the next only after its confirm (probes queued behind it would be
     routed later than they were sent, and pass for routed too early). The pattern is fresh
     each round, so that no earlier round's queue can route anything.

   Every ``--verify-every`` (4th) round, and every round in which probes were returned first
   (B's view lagged: the racy case), the first routed message is looked for in the queue with
   ``basic.get`` on A (until found, or 10 s): a routed publish that never reaches the queue is
   reported as lost. Each round's queue is deleted on A before the next round.
3. **A new replica loads N queues.** ``--n`` (100,000) durable queues, each bound to one direct
   exchange, are seeded into a second fresh namespace with bench_metadata's ``seed`` (bulk
   transactions, not through AMQP), then ``--loads`` (3) times a fresh gateway process is
   started and timed from ``Popen`` to its ``ready: loaded ...`` log line (gateway/app.py,
   ``Readiness.summary``; the replica listens only after it). Also shown: the load time the
   line itself gives, the CPU seconds the process used until ready, its RSS (and per queue +
   binding, over that of a replica whose vhost is empty), and bench_metadata's store-level
   load (``load_once``) of the same vhost. After the seed: the private ZooKeeper's ``mntr``
   (znodes, approximate data size), then a restart of it on its data (how long until it
   serves again, the snapshot it writes once loaded, its transaction log). Before the vhost
   is deleted: **watch lag under write load** (fleet_lag.py): a write on one process -> in
   another process's view of the vhost, ``--lag-probes`` (500) times, while ``--lag-writers``
   (2) other processes declare queues in it at ``--lag-rate`` (1,000) per second in all.
   ``--n 1000000 --loads 1`` is issue 18's million-queue vhost (the private ZooKeeper gets a
   6 GB heap from 500,000 queues: ``--zookeeper-heap``).
4. **Store level: one znode per entity against the single-document baseline** (the anchor's
   design: one JSON znode per vhost; it has no gateway any more, so it is measured with kazoo
   and compared with this gateway's own store, ``ZooKeeperMetadataStore``, without a gateway):

   * from bench_metadata: the largest vhost one znode holds under ZooKeeper's 1 MB limit, and
     its load (``single_document``);
   * declare+bind ops/s in a vhost of 1,000 and of 7,000 queues + bindings, one writer, for
     ``--doc-seconds`` (15) or ``--doc-ops`` (300): here ``create_queue`` + ``add_binding``;
     there each declare and each bind reads the document, decodes it, adds the entity, encodes
     it and writes it back with the version it read (the layout of bench_metadata's
     ``old_document``);
   * a write on one replica -> in another replica's view, ``--doc-rounds`` (100) writes one at a
     time, the other replica a process of its own: here bench_metadata's ``propagation``
     (queue creates); there the time from a bind's write to a watcher (``--doc-watcher``)
     having decoded a version of the document with it, as every replica of that design does on
     every change.

The AMQP client is bench_gateway_vs_pulsar's ``AmqpClient``, a minimal asyncio protocol (pamqp
encodes the methods), not pika: it costs this process well under a millisecond per
declare+bind (printed, together with the threads that read the gateways' logs), against the
gateway's tens of milliseconds, so the figures are the gateway's.

At the end, and on failure or Ctrl-C/SIGTERM: the gateway processes are stopped (SIGINT, then
SIGKILL), the Pulsar namespaces force-deleted, the private ZooKeeper stopped and its data
removed.
Prints one Markdown table, then details (CPU seconds per process and phase, load lines).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
sys.path[:0] = [str(REPO_DIR), str(BENCH_DIR)]

import bench_gateway_vs_pulsar as gvp  # noqa: E402  (bench/, next to this file)
import bench_metadata as bm  # noqa: E402
import fleet_lag  # noqa: E402
import httpx  # noqa: E402
import trio  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import BadVersionError, NoNodeError  # noqa: E402
from pamqp import body, commands, frame, header  # noqa: E402
from server_process import port_open  # noqa: E402

from gateway.metadata.paths import Layout  # noqa: E402
from gateway.metadata.zookeeper import ZooKeeperMetadataStore  # noqa: E402
from gateway.model.entities import Binding, Queue  # noqa: E402
from tests.support.gateway_process import (  # noqa: E402
    GatewayProcess,
    free_port,
    write_config,
)

AmqpClient = gvp.AmqpClient
AmqpError = gvp.AmqpError
CHANNEL = gvp.CHANNEL
READY = re.compile(
    r"ready: loaded (\d+) vhosts \((\d+) exchanges, (\d+) queues, (\d+) bindings\) in ([\d.]+) s"
)
# The private ZooKeeper's garbage collector (``--zookeeper-gc``). Its pauses are every client's
# latency: with a million queues (~1.9 GB live) G1's young collections took 90-300 ms with the
# JVM's default pause goal (200 ms), 20-45 ms every half second with the 10 ms goal of the
# Apache Pulsar Helm chart's ZooKeeper (zookeeper.configData.PULSAR_GC), while ZGC (JDK 15+)
# does not stop the server for a time that grows with the heap (docs/fleet.md, "ZooKeeper's
# collector").
ZOOKEEPER_GC: dict[str, list[str]] = {
    "zgc": ["-XX:+UseZGC"],
    "pulsar-chart": ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=10", "-XX:+ParallelRefProcEnabled"],
    "jvm": [],
}
# The private ZooKeeper's JIT is quiet once its compiler threads use less than this many CPU
# seconds in this many seconds of load (warm_zookeeper).
QUIET_COMPILER = 0.1
QUIET_WINDOW = 2.0
_ROUND_TAG = struct.Struct(">QQ")  # probe body: round, delivery tag on B's channel
DOC_SIZES = (1_000, 7_000)
ROW_ORDER = [
    "ops1-eager",
    "ops1-lazy",
    "cpu1-lazy",
    "ops3-lazy",
    "cpu3-lazy",
    "churn",
    "churn-cpu",
    "churn-left",
    *(f"ops-store-{size}" for size in DOC_SIZES),
    "prop-direct",
    "prop-topic",
    "found",
    *(f"prop-store-{size}" for size in DOC_SIZES),
    "load",
    "load-logged",
    "load-store",
    "rss",
    "lag-load",
    "zookeeper-size",
    "zookeeper-snapshot",
    "capacity",
]


# ============================================================================ plumbing


def percentile(values: list[float], fraction: float) -> float:
    return bm.percentile(values, fraction)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds >= 0.001 else f"{seconds * 1000:.2f} ms"


def p50_p99_max(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{ms(percentile(values, 0.5))} / {ms(percentile(values, 0.99))} / {ms(max(values))}"


def p50_p99(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{ms(percentile(values, 0.5))} / {ms(percentile(values, 0.99))}"


@dataclass
class Run:
    """What one run created (so that ``cleanup`` can remove it) and what it measured."""

    args: argparse.Namespace
    stack: ModuleType
    workdir: Path
    zookeeper_hosts: str = ""  # the private ZooKeeper
    zookeeper_process: subprocess.Popen[bytes] | None = None
    namespaces: list[str] = field(default_factory=list)  # Pulsar namespaces (public/<name>)
    processes: list[GatewayProcess] = field(default_factory=list)
    # row key -> [label, this gateway (one znode per entity), single-document baseline]
    rows: dict[str, list[str]] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)
    loads: list[tuple[str, float, float]] = field(default_factory=list)  # phase, 1-min, busy
    pulsar_pid: int | None = None

    @property
    def zookeeper(self) -> str:
        """The replicas' ``configurationStoreServers``: the private ZooKeeper."""
        return self.zookeeper_hosts

    def cell(self, key: str, label: str, value: str, *, baseline: bool = False) -> None:
        """Fill row ``key`` (labelled ``label`` if new): this gateway's column, or the
        single-document baseline's."""
        row = self.rows.setdefault(key, [label, "", ""])
        row[2 if baseline else 1] = value
        column = "single document" if baseline else "per entity"
        print(f"  => {row[0]} [{column}]: {value}", flush=True)

    def detail(self, text: str) -> None:
        self.details.append(text)
        print(f"  {text}", flush=True)

    def machine_load(self, phase: str) -> None:
        one, five, fifteen = os.getloadavg()
        busy = gvp.background_load(self.args.load_sample)
        self.loads.append((phase, one, busy))
        print(
            f"\n[{phase}] load average {one:.2f} {five:.2f} {fifteen:.2f}; "
            f"{busy:.2f} of {os.cpu_count()} cores busy over the last "
            f"{self.args.load_sample:g} s",
            flush=True,
        )


def trio_run(timeout: float, function: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """``trio.run(function, *args)``, cancelled (TooSlowError) after ``timeout`` seconds."""

    async def bounded() -> Any:
        with trio.fail_after(timeout):
            return await function(*args)

    # trio delivers Ctrl-C at a checkpoint when SIGINT has Python's default handler (ours,
    # raising anywhere, would leave trio's run loop in pieces).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return trio.run(bounded)
    finally:
        signal.signal(signal.SIGINT, previous)


# ---------------------------------------------------------------------------- namespaces


def create_namespace(run: Run, tag: str) -> str:
    name = f"bench-fleet-{tag}-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=run.stack.WEB_URL, timeout=60) as admin:
        admin.put(f"/admin/v2/namespaces/public/{name}").raise_for_status()
    run.namespaces.append(name)
    return name


async def _delete_metadata(zookeeper: str, namespace: str) -> float:
    started = time.perf_counter()
    async with ZooKeeperMetadataStore(zookeeper, request_timeout=60) as store:
        await store.delete_namespace(namespace)
    return time.perf_counter() - started


def drop_namespace(run: Run, name: str) -> None:
    """Force-delete the Pulsar namespace and its gateway metadata."""
    if name not in run.namespaces:
        return
    run.namespaces.remove(name)
    try:
        # A forced delete can fail (HTTP 500) when Pulsar's own inactive-topic cleaner deletes
        # one of the topics at the same moment; another attempt finds it gone.
        with httpx.Client(base_url=run.stack.WEB_URL, timeout=300) as admin:
            for attempt in range(5):
                reply = admin.delete(
                    f"/admin/v2/namespaces/public/{name}", params={"force": "true"}
                )
                if reply.status_code < 300 or reply.status_code == 404:
                    break
                print(f"warning: deleting namespace public/{name}: HTTP {reply.status_code}")
                if attempt == 4:
                    raise RuntimeError(f"namespace public/{name} could not be deleted")
                time.sleep(2)  # before asking again; not a measurement
    finally:
        trio_run(600, _delete_metadata, run.zookeeper, f"public/{name}")


# ---------------------------------------------------------------------------- processes

# What ZooKeeperServerMain needs, from the stack's (Maven-resolved) Pulsar classpath.
ZOOKEEPER_JARS = re.compile(
    r"(zookeeper|zookeeper-jute|slf4j-api|audience-annotations|netty-[a-z-]+|log4j-[a-z0-9-]+"
    r"|metrics-core|commons-io|commons-cli|snappy-java)-\d"
)


def start_private_zookeeper(run: Run, port: int | None = None, timeout: float = 60) -> None:
    """A ZooKeeper server of this run's own on a free loopback port (see the docstring), or
    on ``port`` with the data it has (a restart: it loads its snapshot and log, then writes a
    new snapshot), serving within ``timeout`` seconds."""
    jars = [entry for entry in run.stack.classpath() if ZOOKEEPER_JARS.match(Path(entry).name)]
    if not any(Path(jar).name.startswith("zookeeper-3") for jar in jars):
        raise RuntimeError("no zookeeper jar on the stack's classpath")
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if java is None:
        raise RuntimeError("java is not on PATH (and JAVA_HOME is not set)")
    if port is None:
        port = free_port()
    data = run.workdir / "zookeeper"
    data.mkdir(exist_ok=True)
    command = [
        java,
        f"-Xmx{run.args.zookeeper_heap}",
        *ZOOKEEPER_GC[run.args.zookeeper_gc],
        "-Dzookeeper.admin.enableServer=false",  # its HTTP admin server would take port 8080
        "-Dzookeeper.forceSync=no",  # as the stack's
        "-Dzookeeper.4lw.commands.whitelist=srvr,mntr",  # node count, data size, requests
        "-cp",
        os.pathsep.join(jars),
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(port),
        str(data),
    ]
    with (run.workdir / "zookeeper.log").open("ab") as log:
        run.zookeeper_process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    run.zookeeper_hosts = f"127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if run.zookeeper_process.poll() is not None:
            tail = (run.workdir / "zookeeper.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the private ZooKeeper exited:\n{tail}")
        if port_open(port):
            client = KazooClient(run.zookeeper_hosts)
            try:
                client.start(timeout=max(1.0, deadline - time.monotonic()))
                return
            finally:
                client.stop()
                client.close()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the private ZooKeeper did not serve within {timeout:g} s")
        time.sleep(0.1)  # polling the port, with a deadline


def zookeeper_stats(run: Run) -> dict[str, str]:
    """The private ZooKeeper's ``mntr`` figures (znode count, approximate data size, ...)."""
    host, port = run.zookeeper_hosts.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(b"mntr")
        data = b""
        while chunk := connection.recv(65536):
            data += chunk
    stats: dict[str, str] = {}
    for line in data.decode(errors="replace").splitlines():
        key, _, value = line.partition("\t")
        stats[key.strip()] = value.strip()
    return stats


def zookeeper_requests(run: Run) -> int | None:
    """Requests the private ZooKeeper has received so far (``mntr``'s packets received: every
    request of every client, pings included); None without a private ZooKeeper."""
    if run.zookeeper_process is None:
        return None
    return int(zookeeper_stats(run).get("zk_packets_received", "0"))


def per_op(before: int | None, after: int | None, ops: int) -> str:
    """ZooKeeper requests per operation, as text ("-" when not counted)."""
    if before is None or after is None or ops == 0:
        return "-"
    return f"{(after - before) / ops:.1f}"


@dataclass
class Window:
    """One fixed stretch of a measured phase: operations finished and each process's CPU."""

    seconds: float
    done: int
    cpu: dict[str, float]


class WindowSampler:
    """Operations and CPU seconds per ``interval`` of a phase, so that a long run shows whether
    its rate held. A window that is slower and costs the replica more CPU per operation with
    ZooKeeper's cost per operation unchanged points at the replica; all of them dearer at once
    points at the machine (this VM's speed drifts within minutes)."""

    def __init__(self, pids: dict[str, int], interval: float, done: Callable[[], int]) -> None:
        self.pids, self.interval, self.done = pids, interval, done
        self.windows: list[Window] = []

    async def run(self) -> None:
        """Samples until cancelled; the last partial window is left out."""
        done = self.done()
        while True:
            with gvp.CpuMeter(self.pids) as meter:
                await asyncio.sleep(self.interval)  # the sampling period, not a wait
            now_done = self.done()
            self.windows.append(Window(meter.wall, now_done - done, meter.used))
            done = now_done

    def summary(self, unit: str) -> str:
        """``per 30 s: 1,210 / 1,190 ops/s; replica 0.71 / 0.74 ms, ZooKeeper ... per op``."""
        if len(self.windows) < 2:
            return ""

        def per_op(prefix: str) -> str:
            costs = [
                sum(v for k, v in w.cpu.items() if k.startswith(prefix)) / max(1, w.done) * 1e3
                for w in self.windows
            ]
            return " / ".join(f"{cost:.2f}" for cost in costs)

        rates = " / ".join(f"{w.done / w.seconds:,.0f}" for w in self.windows)
        return (
            f"per {self.interval:g} s: {rates} {unit}s/s; CPU ms per {unit}: replica "
            f"{per_op('replica')}, ZooKeeper {per_op('metadata zk')}"
        )


@contextlib.asynccontextmanager
async def sampled(
    pids: dict[str, int], interval: float, done: Callable[[], int]
) -> AsyncIterator[WindowSampler]:
    sampler = WindowSampler(pids, interval, done)
    task = asyncio.create_task(sampler.run())
    try:
        yield sampler
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def stop_private_zookeeper(run: Run) -> None:
    process = run.zookeeper_process
    if process is None:
        return
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)
    run.zookeeper_process = None


def start_gateway(
    run: Run, name: str, namespace: str, *, extra: str = "", args: tuple[str, ...] = ()
) -> GatewayProcess:
    """A replica with vhost ``/`` on ``public/<namespace>``, on a free port (not waited for);
    ``extra``: more configuration lines; ``args``: more command-line arguments."""
    port = free_port()
    config = write_config(
        run.workdir,
        port=port,
        namespace=namespace,
        zookeeper=run.zookeeper,
        web_url=run.stack.WEB_URL,
        broker_url=run.stack.BROKER_URL,
        extra=extra,
    )
    process = GatewayProcess(name, config, port, args)
    run.processes.append(process)
    return process.start()


def stop_gateway(run: Run, process: GatewayProcess) -> None:
    """SIGINT (it closes its clients and exits), SIGKILL after 30 s."""
    try:
        if process.process is not None and process.process.poll() is None:
            process.signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait_exit(30)
    finally:
        process.close()
        if process in run.processes:
            run.processes.remove(process)


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


# ============================================================================ AMQP helpers


def publish_frames(exchange: str, key: str, payload: bytes, *, mandatory: bool) -> bytes:
    publish = commands.Basic.Publish(exchange=exchange, routing_key=key, mandatory=mandatory)
    return (
        frame.marshal(publish, CHANNEL)
        + frame.marshal(header.ContentHeader(0, len(payload), commands.Basic.Properties()), CHANNEL)
        + frame.marshal(body.ContentBody(payload), CHANNEL)
    )


def is_confirmed(client: gvp.AmqpClient, tag: int) -> bool:
    return tag < client.low or tag in client.acked_above


async def open_clients(ports: list[int], count: int) -> list[gvp.AmqpClient]:
    clients: list[gvp.AmqpClient] = []
    try:
        for index in range(count):
            clients.append(await AmqpClient.open("127.0.0.1", ports[index % len(ports)]))
    except BaseException:
        await close_clients(clients)
        raise
    return clients


async def close_clients(clients: list[gvp.AmqpClient]) -> None:
    for client in clients:
        with contextlib.suppress(Exception):
            await client.close()


async def basic_get_until(
    client: gvp.AmqpClient, queue: str, wanted: bytes, timeout: float
) -> tuple[bool, int]:
    """``basic.get`` (no ack) from ``queue`` until a message whose body starts with ``wanted``
    comes, or ``timeout``; (found, messages got). An empty queue is asked again every 10 ms
    (the message may still be on its way from Pulsar to this replica)."""
    heads: list[bytes] = []
    arrived = asyncio.Event()

    def on_delivery(_tag: int, head: bytes) -> None:
        heads.append(head)
        arrived.set()

    client.on_delivery = on_delivery
    deadline = time.monotonic() + timeout
    got = 0
    try:
        while True:
            # Each Get is answered (a reply left behind would be read as the next method's),
            # so only a dead gateway makes these waits time out.
            client.send(CHANNEL, commands.Basic.Get(queue=queue, no_ack=True))
            reply = await asyncio.wait_for(client.inbox.get(), 30)
            if reply is None:
                raise AmqpError(f"connection lost: {client.lost}")
            if isinstance(reply, commands.Basic.GetOk):
                got += 1
                while len(heads) < got:
                    arrived.clear()
                    await asyncio.wait_for(arrived.wait(), 30)
                if heads[got - 1].startswith(wanted):
                    return True, got
            elif not isinstance(reply, commands.Basic.GetEmpty):
                raise AmqpError(f"basic.get {queue}: {reply.name} {vars(reply)}")
            if time.monotonic() > deadline:
                return False, got
            if isinstance(reply, commands.Basic.GetEmpty):
                await asyncio.sleep(0.01)  # poll interval of the condition, not a wait for it
    finally:
        client.on_delivery = None


# ============================================================================ phase 1


@dataclass
class DeclareBind:
    mode: str  # "eager" (amqpLazySubscriptions=false: the previous design) or "lazy"
    replicas: int
    connections: int
    ops: int
    seconds: float
    latencies: list[float]
    declares: list[float]  # the queue.declare part of each op
    meter: gvp.CpuMeter
    delete_seconds: float
    zk_requests: str = "-"  # ZooKeeper requests per op
    windows: str = ""  # rate and CPU per --window (WindowSampler.summary)

    @property
    def rate(self) -> float:
        return self.ops / self.seconds


async def declare_bind(
    run: Run, ports: list[int], pids: dict[str, int], tag: str, *, mode: str, connections: int
) -> DeclareBind:
    args = run.args
    exchange = "bench.fleet.direct"
    clients = await open_clients(ports, connections)
    names: list[list[str]] = [[] for _ in clients]
    latencies: list[float] = []
    declares: list[float] = []
    budget = [args.ops]
    finished: list[float] = []

    async def one(index: int, client: gvp.AmqpClient, name: str) -> float:
        started = time.perf_counter()
        await client.call(
            commands.Queue.Declare(queue=name, durable=True), commands.Queue.DeclareOk
        )
        declared = time.perf_counter() - started
        names[index].append(name)
        await client.call(
            commands.Queue.Bind(queue=name, exchange=exchange, routing_key=name),
            commands.Queue.BindOk,
        )
        return declared

    async def warm(index: int, client: gvp.AmqpClient) -> None:
        await client.call(
            commands.Exchange.Declare(exchange=exchange, exchange_type="direct", durable=True),
            commands.Exchange.DeclareOk,
        )
        for i in range(args.warmup):
            await one(index, client, f"{tag}-c{index}-w{i}")

    async def work(index: int, client: gvp.AmqpClient, stop_at: float) -> None:
        i = 0
        while budget[0] > 0 and time.perf_counter() < stop_at:
            budget[0] -= 1
            started = time.perf_counter()
            declares.append(await one(index, client, f"{tag}-c{index}-{i}"))
            done = time.perf_counter()
            latencies.append(done - started)
            finished.append(done)
            i += 1

    async def delete(index: int, client: gvp.AmqpClient) -> None:
        for name in names[index]:
            await client.call(commands.Queue.Delete(queue=name), commands.Queue.DeleteOk)

    try:
        async with asyncio.timeout(args.phase_timeout):
            await asyncio.gather(*(warm(i, c) for i, c in enumerate(clients)))
            requests_before = await asyncio.to_thread(zookeeper_requests, run)
            with gvp.CpuMeter(pids) as meter:
                started = time.perf_counter()
                stop_at = started + args.seconds
                async with sampled(pids, args.window, lambda: len(finished)) as windows:
                    await asyncio.gather(*(work(i, c, stop_at) for i, c in enumerate(clients)))
            requests_after = await asyncio.to_thread(zookeeper_requests, run)
            elapsed = max(finished) - started
        async with asyncio.timeout(args.phase_timeout):
            cleanup_started = time.perf_counter()
            await asyncio.gather(*(delete(i, c) for i, c in enumerate(clients)))
            delete_seconds = time.perf_counter() - cleanup_started
    finally:
        await close_clients(clients)
    return DeclareBind(
        mode,
        len(ports),
        len(clients),
        len(latencies),
        elapsed,
        latencies,
        declares,
        meter,
        delete_seconds,
        per_op(requests_before, requests_after, len(latencies)),
        windows.summary("op"),
    )


def report_declare_bind(run: Run, result: DeclareBind) -> None:
    per_replica = result.connections / result.replicas
    design = (
        "subscriptions at declare and bind (amqpLazySubscriptions=false, the previous design)"
        if result.mode == "eager"
        else "lazy subscriptions"
    )
    label = (
        f"declare+bind through {result.replicas} replica{'s' if result.replicas > 1 else ''}, "
        f"{result.connections} connections"
        + (f" ({per_replica:g} per replica)" if result.replicas > 1 else "")
        + f", {design}: ops/s (latency p50 / p99)"
    )
    run.cell(
        f"ops{result.replicas}-{result.mode}",
        label,
        f"{result.rate:,.0f} ops/s ({p50_p99(result.latencies)})",
    )
    used = result.meter.used
    replicas_ms = sum(v for k, v in used.items() if k.startswith("replica")) / result.ops * 1e3
    run.cell(
        f"cpu{result.replicas}-{result.mode}",
        f"CPU per declare+bind, {result.replicas} replica{'s' if result.replicas > 1 else ''} "
        f"({result.mode}): the replicas (together) / the metadata ZooKeeper / the Pulsar JVM",
        f"{replicas_ms:.2f} ms / "
        f"{used.get('metadata zk', 0.0) / result.ops * 1e3:.2f} ms / "
        f"{used.get('pulsar+zk', 0.0) / result.ops * 1e3:.2f} ms; "
        f"{result.zk_requests} ZooKeeper requests per op",
    )
    client_us = result.meter.used.get("client", 0.0) / max(1, result.ops) * 1e6
    pairs = zip(result.latencies, result.declares, strict=True)
    binds = [total - declare for total, declare in pairs]
    run.detail(
        f"declare+bind ({result.mode}), {result.replicas} replica(s): {result.ops} ops in "
        f"{result.seconds:.1f} s; queue.declare p50 / p99 {p50_p99(result.declares)}, "
        f"queue.bind p50 / p99 {p50_p99(binds)}; {result.meter.summary()} ('client' is this "
        f"process: the AMQP client and the gateways' log readers, {client_us:.0f} µs/op); "
        f"deleting the {result.ops + run.args.warmup * result.connections} queues afterwards "
        f"took {result.delete_seconds:.1f} s" + (f"; {result.windows}" if result.windows else "")
    )


# ============================================================================ warm-up


def compiler_cpu_seconds(pid: int) -> float:
    """CPU seconds of a JVM's JIT compiler threads (``C1/C2 CompilerThread``), from /proc (a
    thread's own stat is at /proc/<tid>, like a process's)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            if "Compiler" in (task / "comm").read_text():
                total += gvp.proc_cpu_seconds(int(task.name))
    return total


class CompilerWatch:
    """Whether a JVM's JIT compiler has gone quiet: under ``QUIET_COMPILER`` CPU seconds since
    the previous call (made every ``QUIET_WINDOW`` seconds)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.first = self.last = compiler_cpu_seconds(pid)

    def quiet(self) -> bool:
        now = compiler_cpu_seconds(self.pid)
        used, self.last = now - self.last, now
        return used < QUIET_COMPILER

    @property
    def used(self) -> float:
        """Compiler CPU seconds since this watch was made."""
        return compiler_cpu_seconds(self.pid) - self.first


async def warm_zookeeper(run: Run, port: int) -> None:
    """Declare+bind+delete and churn cycles through the replica on ``port``, unmeasured,
    until the private ZooKeeper's JIT compiler is quiet (under ``QUIET_COMPILER`` CPU
    seconds in ``QUIET_WINDOW`` s) or ``--zookeeper-warmup`` seconds have passed.

    A ZooKeeper serving a fleet has been running for days; this one starts with the run, and
    for its first ~10-20 s of load its JIT compiler threads take most of a core (measured:
    0.7-1.5 s of compiler CPU per 2 s, against ~0.2 s of request handling), CPU that the
    phases would otherwise count as the metadata store's cost per operation and take from the
    replica on a 2-core machine."""
    if run.zookeeper_process is None or run.args.zookeeper_warmup <= 0:
        return
    zookeeper = run.zookeeper_process.pid
    exchange = "bench.fleet.warmup"
    clients = await open_clients([port], 16)
    stop = asyncio.Event()

    async def loop(index: int, client: gvp.AmqpClient) -> None:
        await client.call(
            commands.Exchange.Declare(exchange=exchange, exchange_type="direct"),
            commands.Exchange.DeclareOk,
        )
        n = 0
        while not stop.is_set():
            name = f"warmup-{index}-{n}"
            await client.call(commands.Queue.Declare(queue=name), commands.Queue.DeclareOk)
            await client.call(
                commands.Queue.Bind(queue=name, exchange=exchange, routing_key=name),
                commands.Queue.BindOk,
            )
            await client.call(commands.Queue.Delete(queue=name), commands.Queue.DeleteOk)
            declared = await client.call(
                commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk
            )
            tag = f"warmup-{index}-{n}"
            await client.call(
                commands.Basic.Consume(queue=declared.queue, consumer_tag=tag, no_ack=True),
                commands.Basic.ConsumeOk,
            )
            await client.call(commands.Basic.Cancel(consumer_tag=tag), commands.Basic.CancelOk)
            await client.call(commands.Queue.Delete(queue=declared.queue), commands.Queue.DeleteOk)
            n += 1

    started = time.perf_counter()
    compiler = CompilerWatch(zookeeper)
    try:
        async with asyncio.timeout(run.args.zookeeper_warmup + run.args.phase_timeout):
            tasks = [asyncio.create_task(loop(i, c)) for i, c in enumerate(clients)]
            while time.perf_counter() - started < run.args.zookeeper_warmup:
                await asyncio.sleep(QUIET_WINDOW)
                if any(task.done() for task in tasks):
                    break  # a failed loop: its exception is raised by the gather below
                if compiler.quiet():
                    break
            stop.set()
            await asyncio.gather(*tasks)
            await clients[0].call(
                commands.Exchange.Delete(exchange=exchange), commands.Exchange.DeleteOk
            )
    finally:
        await close_clients(clients)
    run.detail(
        f"private ZooKeeper warmed up for {time.perf_counter() - started:.1f} s (unmeasured "
        f"declare+bind+delete and churn cycles): its JIT compiler used "
        f"{compiler.used:.1f} CPU s meanwhile"
    )


# ============================================================================ churn


@dataclass
class Leftovers:
    """What a vhost holds: Pulsar subscriptions (and the topics holding any), znodes."""

    topics: int
    subscriptions: int
    znodes: int

    def __str__(self) -> str:
        return f"{self.topics} topics with {self.subscriptions} subscriptions, {self.znodes} znodes"


def leftovers(run: Run, namespace: str) -> Leftovers:
    full = f"public/{namespace}"
    topics = subscriptions = 0
    with httpx.Client(base_url=run.stack.WEB_URL, timeout=30) as admin:
        listed = admin.get(f"/admin/v2/persistent/{full}")
        listed.raise_for_status()
        for topic in listed.json():
            path = str(topic).removeprefix("persistent://")
            found = admin.get(f"/admin/v2/persistent/{path}/subscriptions")
            if found.status_code == 200 and found.json():
                topics += 1
                subscriptions += len(found.json())
    client = KazooClient(run.zookeeper_hosts)
    client.start(timeout=30)
    try:

        def count(path: str, depth: int) -> int:
            # Depth 2 is a bucket: made on first use and kept, like the folders.
            own = 0 if depth == 2 else 1
            try:
                children = client.get_children(path)
            except NoNodeError:
                return 0  # deleted since its parent was listed
            return own + sum(count(f"{path}/{child}", depth + 1) for child in children)

        znodes = count(Layout().namespace(full), 0)
    finally:
        client.stop()
        client.close()
    return Leftovers(topics, subscriptions, znodes)


@dataclass
class Churn:
    connections: int
    cycles: int
    replies: int
    seconds: float
    latencies: list[float]
    before: Leftovers
    after: Leftovers
    settled: float | None  # seconds until ``after`` equalled ``before`` (None: never)
    rss_before: float
    rss_after: float
    meter: gvp.CpuMeter | None = None
    zk_requests: str = "-"  # ZooKeeper requests per cycle
    steps: dict[str, str] = field(default_factory=dict)  # each step's p50 / p99
    windows: str = ""  # rate and CPU per --window (WindowSampler.summary)

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds


async def churn(run: Run, replica: GatewayProcess, namespace: str, pids: dict[str, int]) -> Churn:
    """``--churn-connections`` connections each repeating, for ``--churn-seconds``: declare a
    server-named exclusive queue, consume it, (every ``--churn-reply-every``-th cycle) publish
    a reply to it on the default exchange and wait for its delivery, cancel, delete. Before
    and after: the vhost's subscriptions and znodes (equal again once the leader's rounds
    ran: waited for up to ``--churn-settle`` s) and the replica's RSS."""
    args = run.args
    clients = await open_clients([replica.port], args.churn_connections)
    before = await asyncio.to_thread(leftovers, run, namespace)
    rss_before = rss_mib(replica.pid)
    latencies: list[float] = []
    replies = [0]

    steps: dict[str, list[float]] = {}

    def step(name: str, started: float) -> float:
        now = time.perf_counter()
        steps.setdefault(name, []).append(now - started)
        return now

    async def cycle(client: gvp.AmqpClient, index: int, n: int) -> None:
        started = time.perf_counter()
        declared = await client.call(
            commands.Queue.Declare(queue="", exclusive=True), commands.Queue.DeclareOk
        )
        started = step("declare", started)
        queue = declared.queue
        tag = f"churn-{index}-{n}"
        await client.call(
            commands.Basic.Consume(queue=queue, consumer_tag=tag, no_ack=True),
            commands.Basic.ConsumeOk,
        )
        started = step("consume", started)
        if n % args.churn_reply_every == 0:
            delivered = asyncio.Event()
            client.on_delivery = lambda _tag, _head: delivered.set()
            client.write(publish_frames("", queue, b"reply", mandatory=False))
            await asyncio.wait_for(delivered.wait(), 30)
            client.on_delivery = None
            replies[0] += 1
            started = step("reply", started)
        await client.call(commands.Basic.Cancel(consumer_tag=tag), commands.Basic.CancelOk)
        started = step("cancel", started)
        await client.call(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk)
        step("delete" if n % args.churn_reply_every else "delete after a reply", started)

    async def work(index: int, client: gvp.AmqpClient, stop_at: float) -> None:
        n = 0
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            await cycle(client, index, n)
            latencies.append(time.perf_counter() - started)
            n += 1

    try:
        async with asyncio.timeout(args.phase_timeout):
            requests_before = await asyncio.to_thread(zookeeper_requests, run)
            with gvp.CpuMeter(pids) as meter:
                started = time.perf_counter()
                async with sampled(pids, args.window, lambda: len(latencies)) as windows:
                    await asyncio.gather(
                        *(work(i, c, started + args.churn_seconds) for i, c in enumerate(clients))
                    )
                elapsed = time.perf_counter() - started
            requests_after = await asyncio.to_thread(zookeeper_requests, run)
    finally:
        await close_clients(clients)
    waited_from = time.perf_counter()
    settled: float | None = None
    after = await asyncio.to_thread(leftovers, run, namespace)
    while time.perf_counter() - waited_from < args.churn_settle:
        if after == before:
            settled = time.perf_counter() - waited_from
            break
        await asyncio.sleep(1.0)  # the leader's rounds are seconds apart
        after = await asyncio.to_thread(leftovers, run, namespace)
    return Churn(
        len(clients),
        len(latencies),
        replies[0],
        elapsed,
        latencies,
        before,
        after,
        settled,
        rss_before,
        rss_mib(replica.pid),
        meter,
        per_op(requests_before, requests_after, len(latencies)),
        {name: p50_p99(values) for name, values in steps.items()},
        windows.summary("cycle"),
    )


def report_churn(run: Run, result: Churn) -> None:
    run.cell(
        "churn",
        f"queue churn through 1 replica, {result.connections} connections: server-named "
        f"exclusive queue declared, consumed, deleted (a reply in every "
        f"{run.args.churn_reply_every}th): cycles/s (cycle p50 / p99)",
        f"{result.rate:,.0f} cycles/s ({p50_p99(result.latencies)})",
    )
    settled = (
        f"back to the same within {result.settled:.0f} s"
        if result.settled is not None
        else f"**not back within {run.args.churn_settle:.0f} s**"
    )
    run.cell(
        "churn-left",
        "left behind by the churn: before -> after (subscriptions, znodes; RSS)",
        f"{result.before} -> {result.after}, {settled}; RSS {result.rss_before:.0f} -> "
        f"{result.rss_after:.0f} MiB",
    )
    if result.meter is not None:
        used = result.meter.used
        cycles = max(1, result.cycles)
        run.cell(
            "churn-cpu",
            "CPU per churn cycle: the replica / the metadata ZooKeeper / the Pulsar JVM; "
            "ZooKeeper requests per cycle",
            f"{used.get('replica-1', 0.0) / cycles * 1e3:.2f} ms / "
            f"{used.get('metadata zk', 0.0) / cycles * 1e3:.2f} ms / "
            f"{used.get('pulsar+zk', 0.0) / cycles * 1e3:.2f} ms; {result.zk_requests}",
        )
    run.detail(
        f"churn: {result.cycles} cycles ({result.replies} with a reply) in "
        f"{result.seconds:.1f} s through 1 replica"
        + (f"; {result.meter.summary()}" if result.meter is not None else "")
        + "; steps p50 / p99: "
        + ", ".join(f"{name} {figures}" for name, figures in result.steps.items())
        + (f"; {result.windows}" if result.windows else "")
    )


# ============================================================================ phase 2


@dataclass
class Round:
    to_routed: float  # Bind-Ok -> sending of the first routed publish
    to_routed_confirm: float  # Bind-Ok -> its confirm read
    returned: int  # probes returned before it
    gap: float  # sending of the last returned probe -> sending of the first routed one
    returned_after: int  # probes returned after a routed one (should be 0)
    verified: bool | None  # found in the queue by basic.get (None: not sampled)


class Prober:
    """Replica B's connection in confirm mode: which probes came back with a Basic.Return."""

    def __init__(self, client: gvp.AmqpClient) -> None:
        self.client = client
        self.sent = 0  # publishes on the channel since confirm.select = the last delivery tag
        self.returned: set[tuple[int, int]] = set()  # (round, tag)
        client.on_delivery = self._on_content

    def _on_content(self, _tag: int, head: bytes) -> None:
        # On B only Basic.Return carries content: the body says which probe it was.
        if len(head) >= _ROUND_TAG.size:
            self.returned.add(_ROUND_TAG.unpack_from(head))

    def publish(self, exchange: str, key: str, round_no: int, *, mandatory: bool) -> int:
        self.sent += 1
        payload = _ROUND_TAG.pack(round_no, self.sent)
        self.client.write(publish_frames(exchange, key, payload, mandatory=mandatory))
        return self.sent

    async def wait_confirmed(self, deadline: float) -> None:
        await self.client.wait_confirmed(self.sent, deadline)
        if self.client.nacked:
            raise AmqpError(f"{self.client.nacked} probes were nacked")

    def drain_returns(self) -> int:
        """Take the Basic.Return methods out of the inbox; anything else is an error."""
        count = 0
        while not self.client.inbox.empty():
            value = self.client.inbox.get_nowait()
            if not isinstance(value, commands.Basic.Return):
                name = "connection lost" if value is None else value.name
                raise AmqpError(f"unexpected on B: {name} {vars(value) if value else ''}")
            count += 1
        return count


async def probe_round(
    prober: Prober,
    exchange: str,
    key: str,
    round_no: int,
    bind_ok: float,
    *,
    first_alone: bool,
    interval: float,
    max_in_flight: int,
    deadline: float,
) -> tuple[Round, int]:
    """Publish mandatory probes every ``interval`` until one is confirmed without a return."""
    client = prober.client
    tags: list[int] = []
    sent_at: dict[int, float] = {}
    resolved = 0
    first_routed: int | None = None
    confirmed_at = 0.0
    next_send = time.perf_counter()
    while first_routed is None:
        if client.nacked:
            raise AmqpError("a probe was nacked")
        while resolved < len(tags) and is_confirmed(client, tags[resolved]):
            tag = tags[resolved]
            resolved += 1
            if (round_no, tag) not in prober.returned:
                first_routed, confirmed_at = tag, time.perf_counter()
                break
        if first_routed is not None:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"round {round_no}: no routed probe on {exchange}/{key} in time")
        # The first probe of a new topic key waits alone (see the docstring, phase 2).
        may_send = not (first_alone and len(tags) == 1 and resolved == 0)
        may_send = may_send and len(tags) - resolved < max_in_flight
        now = time.perf_counter()
        if may_send and now >= next_send:
            tag = prober.publish(exchange, key, round_no, mandatory=True)
            tags.append(tag)
            sent_at[tag] = time.perf_counter()
            next_send = sent_at[tag] + interval
            continue
        client.confirm_event.clear()
        wait = max(0.0, next_send - time.perf_counter()) if may_send else 1.0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(client.confirm_event.wait(), wait)
    assert first_routed is not None
    await prober.wait_confirmed(deadline)
    returned = sorted(tag for r, tag in prober.returned if r == round_no)
    before = [tag for tag in returned if tag < first_routed]
    after = [tag for tag in returned if tag > first_routed]
    routed_sent = sent_at[first_routed]
    gap = routed_sent - sent_at[before[-1]] if before else 0.0
    result = Round(
        to_routed=routed_sent - bind_ok,
        to_routed_confirm=confirmed_at - bind_ok,
        returned=len(before),
        gap=gap,
        returned_after=len(after),
        verified=None,
    )
    return result, first_routed


async def propagation(run: Run, port_a: int, port_b: int, kind: str) -> list[Round]:
    args = run.args
    a, b = await open_clients([port_a, port_b], 2)
    results: list[Round] = []
    lost: list[str] = []
    try:
        async with asyncio.timeout(args.phase_timeout):
            await b.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
            prober = Prober(b)
            exchange = f"bench.prop.{kind}"
            await a.call(
                commands.Exchange.Declare(exchange=exchange, exchange_type=kind, durable=True),
                commands.Exchange.DeclareOk,
            )
            warmup = 5
            for round_no in range(warmup + args.rounds):
                deadline = time.monotonic() + 30
                queue = f"prop-{kind}-{round_no}"
                if kind == "direct":
                    bind_key = key = f"d{round_no}"
                    # B's producer for the key's topic, before the binding exists (not timed).
                    prober.publish(exchange, key, round_no, mandatory=False)
                    await prober.wait_confirmed(deadline)
                else:
                    bind_key, key = f"k{round_no}.*", f"k{round_no}.p"
                await a.call(
                    commands.Queue.Declare(queue=queue, durable=True), commands.Queue.DeclareOk
                )
                await a.call(
                    commands.Queue.Bind(queue=queue, exchange=exchange, routing_key=bind_key),
                    commands.Queue.BindOk,
                )
                bind_ok = time.perf_counter()
                result, tag = await probe_round(
                    prober,
                    exchange,
                    key,
                    round_no,
                    bind_ok,
                    first_alone=kind == "topic",
                    interval=args.probe_interval,
                    max_in_flight=200,
                    deadline=deadline,
                )
                returns = prober.drain_returns()
                expected = sum(1 for r, _ in prober.returned if r == round_no)
                if returns != expected:
                    raise AmqpError(f"round {round_no}: {returns} returns, {expected} bodies")
                sampled = (round_no - warmup) % args.verify_every == 0
                # A round whose first probes came back is one where B's view lagged: the
                # racy case, always checked.
                if round_no >= warmup and (sampled or result.returned):
                    found, got = await basic_get_until(
                        a, queue, _ROUND_TAG.pack(round_no, tag), timeout=10.0
                    )
                    result.verified = found
                    if not found:
                        lost.append(
                            f"round {round_no} ({result.returned} probes returned first; "
                            f"{got} other messages got)"
                        )
                await a.call(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk)
                if round_no >= warmup:
                    results.append(result)
            await a.call(commands.Exchange.Delete(exchange=exchange), commands.Exchange.DeleteOk)
    finally:
        await close_clients([a, b])
    if lost:
        run.detail(f"LOST ({kind}): routed publish not found in its queue: {', '.join(lost)}")
    return results


def report_propagation(run: Run, kind: str, rounds: list[Round]) -> None:
    what = "direct" if kind == "direct" else "topic, pattern `k<round>.*`, new key `k<round>.p`"
    run.cell(
        f"prop-{kind}",
        f"Bind-Ok on replica A -> mandatory publish on replica B routed, {what} "
        f"({len(rounds)} rounds): p50 / p99 / max",
        p50_p99_max([r.to_routed for r in rounds]),
    )
    sampled = [r for r in rounds if r.verified is not None]
    found = sum(1 for r in sampled if r.verified)
    row = run.rows.get("found", ["", ""])
    earlier = f"{row[1]}; " if row[1] else ""
    run.cell(
        "found",
        f"routed message found in its queue by basic.get (every {run.args.verify_every}th "
        "round, and every round with returned probes)",
        f"{earlier}{kind}: {found} of {len(sampled)}",
    )
    at_once = sum(1 for r in rounds if r.returned == 0)
    gaps = [r.gap for r in rounds if r.returned]
    run.detail(
        f"propagation {kind}: {at_once} of {len(rounds)} rounds routed the very first probe; "
        f"returned probes before the first routed: mean "
        f"{statistics.mean(r.returned for r in rounds):.1f}, max "
        f"{max(r.returned for r in rounds)}; last returned -> first routed probe (the "
        f"resolution): p50 {ms(percentile(gaps, 0.5)) if gaps else 'n/a'}, max "
        f"{ms(max(gaps)) if gaps else 'n/a'}; Bind-Ok -> confirm of the first routed probe "
        f"p50 / p99 / max {p50_p99_max([r.to_routed_confirm for r in rounds])}; returned "
        f"after a routed one: {sum(r.returned_after for r in rounds)}"
    )


# ============================================================================ phase 3


@dataclass
class Load:
    to_ready: float  # Popen -> the ready line read
    logged: float  # the load time in the ready line
    cpu: float  # CPU seconds of the process until ready
    rss: float
    counts: tuple[int, int, int, int]  # vhosts, exchanges, queues, bindings


def load_replica(run: Run, namespace: str, index: int) -> Load:
    started = time.perf_counter()
    process = start_gateway(run, f"loader-{index}", namespace)
    try:
        match = process.wait_for(READY.pattern, timeout=run.args.load_timeout)[0]
        ready = time.perf_counter()
        cpu = gvp.proc_cpu_seconds(process.pid)
        process.wait_for(r"gateway\.server: listening on", timeout=60)
        rss = rss_mib(process.pid)
    finally:
        stop_gateway(run, process)
    vhosts, exchanges, queues, bindings = (int(match.group(i)) for i in range(1, 5))
    return Load(
        ready - started, float(match.group(5)), cpu, rss, (vhosts, exchanges, queues, bindings)
    )


def empty_replica_rss(run: Run) -> float:
    """The RSS of a replica whose only vhost is empty (what the loaded one is compared to)."""
    namespace = create_namespace(run, "empty")
    process = start_gateway(run, "empty", namespace)
    try:
        process.wait_for(r"gateway\.server: listening on", timeout=run.args.load_timeout)
        return rss_mib(process.pid)
    finally:
        stop_gateway(run, process)
        drop_namespace(run, namespace)


def load_phase(run: Run) -> None:
    args = run.args
    # Before seeding: every replica loads every vhost of its ZooKeeper, this one included.
    empty = empty_replica_rss(run)
    namespace = create_namespace(run, "load")
    full = f"public/{namespace}"
    print(f"seeding {args.n:,} queues + bindings into {full} (bench_metadata.seed) ...", flush=True)
    seconds = trio_run(
        args.phase_timeout * 5, bm.seed, run.zookeeper, "/starlight-rabbitmq", args.n, full
    )
    run.detail(
        f"seed {args.n:,} queues + bindings (bulk_create): {seconds:.1f} s "
        f"({args.n / seconds:,.0f} queues + bindings per second)"
    )
    stats = zookeeper_stats(run)
    znodes = int(stats.get("zk_znode_count", "0"))
    data_size = int(stats.get("zk_approximate_data_size", "0"))
    run.cell(
        "zookeeper-size",
        f"ZooKeeper holding the {args.n:,}-queue vhost (and the fleet phases' leftovers): "
        "znodes, approximate data size (mntr)",
        f"{znodes:,} znodes, {data_size / 2**20:.0f} MiB of data+paths "
        f"({data_size / max(1, args.n):.0f} B per queue + binding)",
    )
    restart_zookeeper(run)

    run.machine_load("load: store level")
    store_loads = []
    for _ in range(args.loads):
        elapsed, queues, bindings = trio_run(
            args.load_timeout, bm.load_once, run.zookeeper, "/starlight-rabbitmq", full
        )
        assert queues == args.n and bindings == args.n, (queues, bindings)
        store_loads.append(elapsed)
        print(f"  store-level load: {elapsed:.2f} s", flush=True)

    loads: list[Load] = []
    for index in range(args.loads):
        run.machine_load(f"load: new replica {index + 1}")
        load = load_replica(run, namespace, index)
        if load.counts[2] < args.n or load.counts[3] < args.n:
            raise RuntimeError(f"the replica loaded {load.counts}, expected {args.n} queues")
        print(
            f"  replica: ready {load.to_ready:.2f} s after start (load {load.logged:.2f} s, "
            f"{load.cpu:.1f} CPU s, RSS {load.rss:.0f} MiB), loaded {load.counts}",
            flush=True,
        )
        loads.append(load)

    best = min(loads, key=lambda item: item.to_ready)
    median = statistics.median(item.to_ready for item in loads)
    run.cell(
        "load",
        f"new replica, vhost of {args.n:,} queues + {args.n:,} bindings: process start -> "
        f"ready (best / median of {len(loads)})",
        f"{best.to_ready:.2f} s / {median:.2f} s",
    )
    run.cell(
        "load-logged",
        "of which loading the metadata, as its ready line says (best / median)",
        f"{min(item.logged for item in loads):.2f} s / "
        f"{statistics.median(item.logged for item in loads):.2f} s",
    )
    per_entity = min(store_loads) / args.n * 1e6
    run.cell(
        "load-store",
        "load, store level (bench_metadata: load_once / single_document; best)",
        f"{args.n:,} in {min(store_loads):.2f} s ({per_entity:.0f} µs per queue + binding)",
    )
    run.cell(
        "capacity",
        "largest vhost (queues + bindings) (bench_metadata.single_document)",
        f"no per-vhost limit from ZooKeeper's node size; {args.n:,} loaded here",
    )
    rss = statistics.median(item.rss for item in loads)
    run.cell(
        "rss",
        "replica's memory (RSS) once ready; per queue + binding, over an empty replica's",
        f"{rss:.0f} MiB (empty: {empty:.0f} MiB); "
        f"{(rss - empty) * 2**20 / args.n:,.0f} B per queue + binding",
    )
    run.detail(
        "new replica: CPU seconds until ready "
        + ", ".join(f"{item.cpu:.1f}" for item in loads)
        + "; ready lines report "
        + ", ".join(str(item.counts) for item in loads)
        + " (vhosts, exchanges, queues, bindings)"
    )
    if args.lag_probes:
        watch_lag_under_load(run, full)
    started = time.perf_counter()
    drop_namespace(run, namespace)
    run.detail(f"deleting the {args.n:,}-queue vhost: {time.perf_counter() - started:.1f} s")


def restart_zookeeper(run: Run) -> None:
    """Restart the private ZooKeeper on its data: how long a server holding this vhost takes
    to come back (it reads its snapshot and replays its log), and the size of the snapshot it
    writes once loaded (what a follower joining an ensemble is sent)."""
    port = int(run.zookeeper_hosts.rsplit(":", 1)[1])
    stop_private_zookeeper(run)
    started = time.perf_counter()
    start_private_zookeeper(run, port, timeout=run.args.load_timeout)
    restart = time.perf_counter() - started
    version = run.workdir / "zookeeper" / "version-2"
    deadline = time.monotonic() + 120
    snapshots: list[Path] = []
    while time.monotonic() < deadline:  # the snapshot is written after the server serves
        snapshots = sorted(version.glob("snapshot.*"), key=lambda path: path.stat().st_mtime)
        if snapshots and snapshots[-1].stat().st_mtime >= time.time() - restart - 1:
            break
        time.sleep(0.5)
    logs = sum(path.stat().st_size for path in version.glob("log.*"))
    snapshot = f"{snapshots[-1].stat().st_size / 2**20:.0f} MiB" if snapshots else "none"
    run.cell(
        "zookeeper-snapshot",
        "the private ZooKeeper restarted on that data: start -> serving; its snapshot; its "
        "transaction log (preallocated in 64 MiB blocks); its heap after a full GC, its RSS",
        f"{restart:.1f} s; snapshot {snapshot}; log {logs / 2**20:.0f} MiB; {zookeeper_heap(run)}",
    )


def zookeeper_heap(run: Run) -> str:
    """The private ZooKeeper's live heap (``jcmd GC.run``, then ``GC.heap_info``'s used) and
    its RSS: what the data tree costs a server."""
    process = run.zookeeper_process
    if process is None:
        return "n/a"
    rss = f"RSS {rss_mib(process.pid):,.0f} MiB"
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return f"heap n/a (no jcmd); {rss}"
    try:
        subprocess.run([jcmd, str(process.pid), "GC.run"], capture_output=True, timeout=300)
        info = subprocess.run(
            [jcmd, str(process.pid), "GC.heap_info"], capture_output=True, text=True, timeout=60
        ).stdout
    except subprocess.TimeoutExpired:
        return f"heap n/a (jcmd timed out); {rss}"
    # The heap's line comes first: G1's "garbage-first heap total ..K, used ..K", ZGC's
    # "ZHeap used ..M, capacity ..M" (Metaspace's follows).
    used = re.search(r"used (\d+)([KMG])", info)
    if used is None:
        return f"heap n/a; {rss}"
    heap = int(used.group(1)) / {"K": 2**20, "M": 2**10, "G": 1}[used.group(2)]
    if run.args.zookeeper_gc == "zgc":
        rss += " (ZGC maps its heap three times, and RSS counts each mapping)"
    return f"heap {heap:,.2f} GiB after a full GC; {rss}"


def watch_lag_under_load(run: Run, namespace: str) -> None:
    """fleet_lag.py: a write on one process -> in another's view of the big vhost, while
    ``--lag-writers`` processes declare queues in it at ``--lag-rate`` per second in all."""
    args = run.args
    run.machine_load("load: watch lag under write load")
    result: fleet_lag.LagResult = trio_run(
        args.load_timeout * 2,
        partial(
            fleet_lag.measure,
            run.zookeeper,
            "/starlight-rabbitmq",
            namespace,
            rate=args.lag_rate,
            writers=args.lag_writers,
            probes=args.lag_probes,
            warmup=args.lag_warmup,
            tag=uuid.uuid4().hex[:8],
            settled=None
            if run.zookeeper_process is None or args.zookeeper_warmup <= 0
            else CompilerWatch(run.zookeeper_process.pid).quiet,
            settle_limit=args.zookeeper_warmup,
            settle_every=QUIET_WINDOW,
        ),
    )
    run.cell(
        "lag-load",
        f"a write on one process -> in another's view (store level), vhost of {args.n:,}, "
        f"{args.lag_writers} other processes declaring queues at {args.lag_rate:,.0f}/s in "
        f"all ({args.lag_probes} probes): p50 / p99 / max",
        f"{p50_p99_max(result.seen)} (writers reached {result.writer_rate:,.0f} ops/s)",
    )
    run.detail(f"watch lag under load: {fleet_lag.summary(result)}")


# ============================================================================ phase 4


DOC_QUEUE: dict[str, Any] = {
    "durable": True,
    "exclusive": False,
    "autoDelete": False,
    "arguments": {},
}


def rewrite(client: KazooClient, path: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Read, decode, change, encode, write back if nobody wrote meanwhile (else again)."""
    while True:
        data, stat = client.get(path)
        document: dict[str, Any] = json.loads(data)
        change(document)
        encoded = json.dumps(document, separators=(",", ":")).encode()
        try:
            client.set(path, encoded, version=stat.version)
            return
        except BadVersionError:
            continue


def doc_declare_bind(client: KazooClient, path: str, name: str) -> float:
    """A declare and a bind in the single document; the time the bind's write returned."""
    rewrite(client, path, lambda doc: doc["queues"].__setitem__(name, dict(DOC_QUEUE)))
    binding = {"queue": name, "key": name, "arguments": {}}
    rewrite(client, path, lambda doc: doc["exchanges"][bm.EXCHANGE]["bindings"].append(binding))
    return time.perf_counter()


class Watcher:
    """``bench_fleet.py --doc-watcher HOSTS PATH`` in a process of its own: a replica of the
    single-document design, reporting the bindings count of every version it decodes."""

    def __init__(self, hosts: str, path: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--doc-watcher", hosts, path],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.seen: list[tuple[int, float]] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            _, count, at = line.split()
            with self._changed:
                self.seen.append((int(count), float(at)))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, bindings: int, timeout: float) -> float:
        """When the watcher first decoded a document with at least ``bindings`` bindings."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for count, at in self.seen:
                    if count >= bindings:
                        return at
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise TimeoutError(f"the watcher did not see {bindings} bindings")
                self._changed.wait(min(left, 0.5))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._thread.join(10)


def doc_watcher(hosts: str, path: str) -> None:
    client = KazooClient(hosts)
    client.start(timeout=30)
    done = threading.Event()

    @client.DataWatch(path)  # type: ignore[untyped-decorator]
    def changed(data: bytes | None, _stat: Any) -> bool:
        if data is None:
            done.set()
            return False
        view = bm.decode_old_document(data)
        print(f"seen {len(view.bindings)} {time.perf_counter():.9f}", flush=True)
        return True

    try:
        done.wait()
    finally:
        client.stop()
        client.close()


def single_document_writes(run: Run, size: int) -> None:
    args = run.args
    hosts = run.zookeeper
    path = f"/single-document-{size}"
    client = KazooClient(hosts)
    client.start(timeout=30)
    watcher: Watcher | None = None
    try:
        client.create(path, bm.old_document(size))
        latencies: list[float] = []
        started = time.perf_counter()
        stop_at = started + args.doc_seconds
        while len(latencies) < args.doc_ops and time.perf_counter() < stop_at:
            op_started = time.perf_counter()
            done = doc_declare_bind(client, path, f"w-{len(latencies):06d}")
            latencies.append(done - op_started)
        elapsed = time.perf_counter() - started
        bindings = size + len(latencies)
        watcher = Watcher(hosts, path)
        watcher.wait_for(bindings, timeout=60)
        seen: list[float] = []
        for index in range(args.doc_rounds):
            done = doc_declare_bind(client, path, f"p-{index:06d}")
            bindings += 1
            seen.append(watcher.wait_for(bindings, timeout=30) - done)
        document_kib = len(client.get(path)[0]) / 1024
    finally:
        if watcher is not None:
            watcher.close()
        with contextlib.suppress(Exception):
            client.delete(path)
        client.stop()
        client.close()
    run.cell(
        f"ops-store-{size}",
        ops_store_label(size),
        f"{len(latencies) / elapsed:,.0f} ops/s ({p50_p99(latencies)})",
        baseline=True,
    )
    run.cell(f"prop-store-{size}", prop_store_label(size), p50_p99_max(seen), baseline=True)
    run.detail(
        f"single document of {size:,}: {len(latencies)} declare+bind in {elapsed:.1f} s; "
        f"document {document_kib:.0f} KiB at the end"
    )


def ops_store_label(size: int) -> str:
    return (
        f"declare+bind, store level, 1 writer, vhost of {size:,} queues + bindings: ops/s "
        "(latency p50 / p99)"
    )


def prop_store_label(size: int) -> str:
    return (
        f"a write on one replica -> in another replica's view, store level, vhost of "
        f"{size:,}: p50 / p99 / max"
    )


async def per_entity_store(
    hosts: str, namespace: str, size: int, ops: int, seconds: float, writes: int
) -> tuple[list[float], float, list[float]]:
    """This gateway's store (no gateway, no Pulsar): ``size`` queues + bindings seeded, then
    one writer doing create_queue + add_binding (each a ZooKeeper transaction) for
    ``seconds`` or ``ops``; then bench_metadata's propagation (``writes`` queue creates, each
    until a store in another process has it in its view). Latencies, seconds, propagations."""
    prefix = "/starlight-rabbitmq"
    await bm.seed(hosts, prefix, size, namespace)
    latencies: list[float] = []
    async with ZooKeeperMetadataStore(hosts, request_timeout=60) as store:
        await store.open(namespace)
        started = time.perf_counter()
        stop_at = started + seconds
        while len(latencies) < ops and time.perf_counter() < stop_at:
            name = f"w-{len(latencies):06d}"
            op_started = time.perf_counter()
            await store.create_queue(namespace, Queue(name, durable=True))
            await store.add_binding(namespace, Binding(name, bm.EXCHANGE, name))
            latencies.append(time.perf_counter() - op_started)
        elapsed = time.perf_counter() - started
    _, seen, _, _ = await bm.propagation(hosts, prefix, namespace, writes, "f")
    async with ZooKeeperMetadataStore(hosts, request_timeout=60) as store:
        await store.delete_namespace(namespace)
    return latencies, elapsed, seen


def single_document_phase(run: Run) -> None:
    run.machine_load("single document: capacity and load (bench_metadata)")
    baseline = bm.single_document(run.zookeeper, "/single-document-probe", max(run.args.n, 8000))
    run.cell(
        "capacity",
        "largest vhost (queues + bindings) (bench_metadata.single_document)",
        f"{baseline['largest']:,} ({baseline['bytes'] / 1024:.0f} KiB in one znode; "
        f"the write of {baseline['breaks_at']:,} is refused)",
        baseline=True,
    )
    run.cell(
        "load",
        "",
        f"cannot hold {run.args.n:,}" if run.args.n > baseline["largest"] else "",
        baseline=True,
    )
    per_entity = baseline["load"] / baseline["largest"] * 1e6
    run.cell(
        "load-store",
        "",
        f"{baseline['largest']:,} in {baseline['load']:.3f} s ({per_entity:.0f} µs per "
        "queue + binding)",
        baseline=True,
    )
    args = run.args
    for size in DOC_SIZES:
        run.machine_load(f"store level, one znode per entity: writes at {size:,}")
        latencies, elapsed, seen = trio_run(
            args.phase_timeout,
            per_entity_store,
            run.zookeeper,
            f"public/bench-fleet-store-{size}",
            size,
            args.doc_ops,
            args.doc_seconds,
            args.doc_rounds,
        )
        rate = len(latencies) / elapsed
        run.cell(
            f"ops-store-{size}", ops_store_label(size), f"{rate:,.0f} ops/s ({p50_p99(latencies)})"
        )
        run.cell(f"prop-store-{size}", prop_store_label(size), p50_p99_max(seen))
        run.machine_load(f"store level, single document: writes at {size:,}")
        single_document_writes(run, size)


# ============================================================================ the run


def eager_phase(run: Run) -> None:
    """declare+bind as the previous design did it: subscriptions created at declare and
    bind (``amqpLazySubscriptions=false``), one replica on a namespace of its own."""
    namespace = create_namespace(run, "eager")
    pids: dict[str, int] = {}
    if run.pulsar_pid:
        pids["pulsar+zk"] = run.pulsar_pid
    if run.zookeeper_process is not None:
        pids["metadata zk"] = run.zookeeper_process.pid
    replica = start_gateway(
        run, "replica-eager", namespace, extra="amqpLazySubscriptions=false\n"
    ).wait_ready()
    pids["replica-eager"] = replica.pid
    run.machine_load("declare+bind, 1 replica, eager")
    result = asyncio.run(
        declare_bind(
            run,
            [replica.port],
            pids,
            "eager",
            mode="eager",
            connections=run.args.eager_connections,
        )
    )
    report_declare_bind(run, result)
    stop_gateway(run, replica)
    drop_namespace(run, namespace)


def fleet_phases(run: Run) -> None:
    if "ops" not in run.args.skip and "eager" not in run.args.skip:
        eager_phase(run)
    namespace = create_namespace(run, "ops")
    print(f"namespace public/{namespace}, ZooKeeper {run.zookeeper}", flush=True)
    pids: dict[str, int] = {}
    if run.pulsar_pid:
        pids["pulsar+zk"] = run.pulsar_pid
    if run.zookeeper_process is not None:
        pids["metadata zk"] = run.zookeeper_process.pid
    workers = run.args.replica_workers
    first = start_gateway(
        run, "replica-1", namespace, args=("--workers", str(workers)) if workers > 1 else ()
    )
    replicas = [first.wait_ready()]
    pids["replica-1"] = first.pid
    for number, pid in enumerate(sorted(first.worker_pids), 1):
        pids[f"replica-1 worker {number}"] = pid  # counted with the replica's CPU
    if "ops" not in run.args.skip or "churn" not in run.args.skip:
        asyncio.run(warm_zookeeper(run, first.port))

    if "ops" not in run.args.skip:
        run.machine_load("declare+bind, 1 replica")
        result = asyncio.run(
            declare_bind(
                run,
                [replicas[0].port],
                pids,
                "one",
                mode="lazy",
                connections=run.args.connections,
            )
        )
        report_declare_bind(run, result)

    if "churn" not in run.args.skip:
        run.machine_load("churn, 1 replica")
        churned = asyncio.run(churn(run, replicas[0], namespace, pids))
        report_churn(run, churned)

    if "three" in run.args.skip:  # no second and third replica: no phase needs them
        run.args.skip.append("propagation")
    started = [
        start_gateway(run, f"replica-{i}", namespace)
        for i in ((2, 3) if "three" not in run.args.skip else ())
    ]
    replicas += [process.wait_ready() for process in started]
    for process in replicas:
        pids[process.name] = process.pid
    ports = [process.port for process in replicas]

    if "ops" not in run.args.skip and "three" not in run.args.skip:
        run.machine_load("declare+bind, 3 replicas")
        result = asyncio.run(
            declare_bind(run, ports, pids, "three", mode="lazy", connections=run.args.connections)
        )
        report_declare_bind(run, result)

    kinds = [kind for kind in ("direct", "topic") if kind not in run.args.skip]
    for kind in kinds if "propagation" not in run.args.skip else []:
        run.machine_load(f"propagation, {kind}")
        rounds = asyncio.run(propagation(run, ports[0], ports[1], kind))
        report_propagation(run, kind, rounds)

    for process in replicas:
        stop_gateway(run, process)
    started_drop = time.perf_counter()
    drop_namespace(run, namespace)
    run.detail(
        f"force-deleting the fleet namespace and its metadata: "
        f"{time.perf_counter() - started_drop:.1f} s"
    )


def cleanup(run: Run) -> None:
    for process in list(run.processes):
        try:
            stop_gateway(run, process)
        except Exception as error:
            print(f"warning: stopping {process.name}: {error}")
    for name in list(run.namespaces):
        try:
            drop_namespace(run, name)
        except Exception as error:
            print(f"warning: dropping namespace public/{name}: {error}")
    stop_private_zookeeper(run)


def print_table(run: Run) -> None:
    one_min = [one for _, one, _ in run.loads]
    busy = [b for _, _, b in run.loads]
    print()
    print(f"machine: {gvp.machine_line()}")
    if run.loads:
        print(
            f"load before the phases: load average (1 min) {min(one_min):.2f}-{max(one_min):.2f}, "
            f"{min(busy):.2f}-{max(busy):.2f} cores busy (sampled {run.args.load_sample:g} s)"
        )
    print()
    print("| figure | this gateway (one znode per entity) | single-document design (baseline) |")
    print("| --- | --- | --- |")
    keys = [key for key in ROW_ORDER if key in run.rows]
    keys += [key for key in run.rows if key not in keys]
    for key in keys:
        label, ours, baseline = run.rows[key]
        print(f"| {label or key} | {ours or '-'} | {baseline or '-'} |")
    print()
    for text in run.details:
        print(f"- {text}")
    for phase, one, b in run.loads:
        print(f"- load before {phase}: load average {one:.2f}, {b:.2f} cores busy")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller sizes (about 2 minutes): 10,000 queues, 50 rounds, 5 s runs",
    )
    parser.add_argument("--n", type=int, help="queues (each with a binding) a new replica loads")
    parser.add_argument("--loads", type=int, help="new replicas started (best / median)")
    parser.add_argument(
        "--connections", type=int, default=48, help="AMQP connections, phase 1 (lazy)"
    )
    parser.add_argument(
        "--eager-connections",
        type=int,
        default=6,
        help="AMQP connections, phase 1 with amqpLazySubscriptions=false (the previous figure)",
    )
    parser.add_argument("--churn-connections", type=int, default=16, help="churn: connections")
    parser.add_argument("--churn-seconds", type=float, help="churn: seconds of cycles")
    parser.add_argument(
        "--churn-reply-every", type=int, default=4, help="churn: a reply in every n-th cycle"
    )
    parser.add_argument(
        "--churn-settle", type=float, default=60.0, help="churn: seconds to wait for cleanup"
    )
    parser.add_argument("--seconds", type=float, help="phase 1: seconds per run at most")
    parser.add_argument("--ops", type=int, help="phase 1: declare+bind per run at most")
    parser.add_argument("--warmup", type=int, default=5, help="phase 1: unmeasured per connection")
    parser.add_argument(
        "--window",
        type=float,
        default=30.0,
        help="declare+bind and churn: rate and CPU per op printed per window of this many "
        "seconds (runs of two windows or more)",
    )
    parser.add_argument(
        "--zookeeper-warmup",
        type=float,
        default=60.0,
        help="at most this many seconds of unmeasured load before phase 1 and the churn, until "
        "the private ZooKeeper's JIT compiler is quiet (0: none)",
    )
    parser.add_argument(
        "--zookeeper-gc",
        choices=sorted(ZOOKEEPER_GC),
        default="zgc",
        help="the private ZooKeeper's garbage collector: ZGC (default), G1 as the Apache Pulsar "
        "Helm chart runs it (pulsar-chart), or the JVM's default (jvm)",
    )
    parser.add_argument(
        "--replica-workers",
        type=int,
        default=1,
        help="replica 1 runs as `--workers N` (one replica, N processes on its port)",
    )
    parser.add_argument("--rounds", type=int, help="phase 2: rounds per exchange type")
    parser.add_argument("--probe-interval", type=float, default=0.001, help="phase 2: seconds")
    parser.add_argument("--verify-every", type=int, default=4, help="phase 2: basic.get sample")
    parser.add_argument("--doc-seconds", type=float, help="phase 4: seconds of writes at most")
    parser.add_argument("--doc-ops", type=int, help="phase 4: declare+bind at most")
    parser.add_argument("--doc-rounds", type=int, help="phase 4: propagation writes")
    parser.add_argument("--phase-timeout", type=float, default=300.0, help="seconds per phase")
    parser.add_argument("--load-timeout", type=float, default=600.0, help="seconds per load")
    parser.add_argument("--load-sample", type=float, default=2.0, help="seconds of CPU sampling")
    parser.add_argument(
        "--zookeeper-heap",
        help="-Xmx of the private ZooKeeper (default: 2g; 6g from 500,000 queues: a million "
        "queues + bindings are 4 million znodes, ~460 MiB of paths and data)",
    )
    parser.add_argument(
        "--lag-rate", type=float, default=1000.0, help="load: queue declares per second in all"
    )
    parser.add_argument("--lag-writers", type=int, default=2, help="load: writer processes")
    parser.add_argument(
        "--lag-probes", type=int, help="load: watch lag probes under write load (0: skip)"
    )
    parser.add_argument(
        "--lag-warmup", type=float, default=3.0, help="load: seconds of writes before probing"
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=[
            "fleet",
            "ops",
            "eager",
            "three",
            "churn",
            "propagation",
            "direct",
            "topic",
            "load",
            "document",
        ],
        help="leave a phase out (repeatable): fleet = ops + propagation; three = the runs "
        "through 3 replicas (ops and propagation)",
    )
    args = parser.parse_args(argv)
    defaults = {
        "n": (100_000, 10_000),
        "loads": (3, 1),
        "seconds": (15.0, 5.0),
        "churn_seconds": (60.0, 10.0),
        "ops": (4000, 1000),
        "rounds": (200, 50),
        "doc_seconds": (15.0, 5.0),
        "doc_ops": (300, 100),
        "doc_rounds": (100, 30),
        "lag_probes": (500, 100),
    }
    for name, (full, quick) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.zookeeper_heap is None:
        args.zookeeper_heap = "6g" if args.n >= 500_000 else "2g"
    if args.doc_ops + args.doc_rounds > 800:
        parser.error("--doc-ops + --doc-rounds must stay under 800 (7,000 + them fit in 1 MB)")
    return args


def _interrupt(signum: int, _frame: Any) -> None:
    """SIGINT and SIGTERM end the run at once, wherever it is (cleanup follows). Not
    asyncio's own SIGINT handling: it cancels the main task, and before Python 3.12
    ``asyncio.wait_for`` can swallow that cancellation when its reply arrives meanwhile."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    # bench_metadata's capacity probe drops connections on purpose; kazoo would warn each time.
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    for name in [name for name in os.environ if name.startswith("STARLIGHT_")]:
        del os.environ[name]  # the gateways read their configuration from the file only
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    stack = gvp.load_stack()
    if not stack.is_up():
        print("the local stack is not up: python3 scripts/stack.py up", file=sys.stderr)
        return 2
    print(f"machine: {gvp.machine_line()}", flush=True)
    run = Run(
        args=args,
        stack=stack,
        workdir=Path(tempfile.mkdtemp(prefix="bench-fleet-")),
        pulsar_pid=gvp.find_pid("PulsarStandaloneStarter"),
    )
    try:
        start_private_zookeeper(run)
        print(f"private ZooKeeper at {run.zookeeper}", flush=True)
        if "fleet" not in args.skip:
            fleet_phases(run)
        if "load" not in args.skip:
            load_phase(run)
        if "document" not in args.skip:
            single_document_phase(run)
    finally:
        # Every step of the cleanup is bounded; a second Ctrl-C must not leave things behind.
        print("\ncleaning up (signals are ignored meanwhile) ...", flush=True)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            cleanup(run)
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            shutil.rmtree(run.workdir, ignore_errors=True)
    print_table(run)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--doc-watcher"]:
        doc_watcher(sys.argv[2], sys.argv[3])
        sys.exit(0)
    try:
        sys.exit(main())
    except BaseException as error:
        interrupted = isinstance(error, KeyboardInterrupt) or (
            isinstance(error, BaseExceptionGroup) and error.subgroup(KeyboardInterrupt)
        )
        if not interrupted:
            raise
        print("interrupted; cleaned up", file=sys.stderr)
        sys.exit(130)
