"""The gateway against the raw pulsar-client on the same Pulsar, measured in one run.

    .venv/bin/python bench/bench_gateway_vs_pulsar.py            # needs the local stack up
    .venv/bin/python bench/bench_gateway_vs_pulsar.py -n 5000 --no-rabbitmq   # quicker

Same work on both sides, in a fresh Pulsar namespace (deleted afterwards, with the gateway's
ZooKeeper metadata of it):

* **raw**: pulsar-client's producer (``send_async``, with the gateway's producer settings:
  batching 1 ms, 1000 messages, 128 KiB, as the gateway's producers batch on every broker;
  one entry per message with ``--raw-batching never`` or when the gateway does not batch,
  ``--no-batching``), N messages of 1 KiB, timed until the last send callback;
  then a new Shared subscription from the earliest message, ``receive`` + ``acknowledge`` until
  N, timed from subscribe to the last ack.
* **gateway**: ``starlight-rabbitmq`` started as a subprocess on a free loopback port. The
  AMQP client below publishes N persistent 1 KiB messages to a durable queue through the default
  exchange with publisher confirms, keeping a window of W unconfirmed (default 500), timed until
  the last confirm; then ``basic.consume`` with ``basic.qos`` prefetch P (default 500), one
  ``basic.ack`` per message, timed from consume to the last ack sent.
* **both at once**: the same publish and consume concurrently (two connections; for raw, a
  producer and a consumer thread); the consumer's rate runs from consume to the last delivery.
* **latency**: a trickle (default 1000 messages at 200/s, after 20 unmeasured ones) with the
  consumer already attached: publish→deliver and publish→confirm, p50/p99/max.
* **RabbitMQ (same client)**: if Debian's rabbitmq-server is installed, the same AMQP phases
  against a private RabbitMQ node (bench/rabbitmq.py): the client's ceiling on this machine, and
  a gateway/RabbitMQ ratio with a Python client.

The AMQP client is a minimal asyncio ``Protocol`` written for this benchmark: pamqp encodes and
decodes the handshake and the synchronous methods; the hot path is hand-written: a publish is
one prebuilt byte string (method + header + body frames), confirms and deliveries are parsed
with ``struct.unpack_from`` straight out of the receive buffer, and the acks of one read are
written with one ``write``. Its CPU time is measured per phase and printed as µs/message, so a
reader can see how far it is from being the bottleneck.

The throughput phases run ``--repeat`` times (default 3), the raw client's and the gateway's
repetitions alternating; the table shows the best of each (background noise only ever makes
numbers worse), then the gateway/raw ratio of each round (a raw repetition and the gateway's
right after it) with the median, and every repetition.

Also printed per phase: CPU seconds used by the gateway process, the Pulsar JVM, this process,
and everything else on the machine (from /proc), so that results on a busy machine can be
recognised as such (``--wait-quiet`` waits for a quiet machine first). ``--profile DIR`` records
the gateway with py-spy during its first repetition of each throughput phase and prints the top
functions; ``--aio-pika`` adds aio-pika's figures against RabbitMQ.

``--batch-index-acks`` runs the Pulsar phases against a standalone of the run's own instead
of the local stack (free ports, the local stack's memory settings, its data in a temporary
folder, stopped after; ~30 s to start) whose broker keeps acknowledgements per batch index
(``acknowledgmentAtBatchIndexLevelEnabled=true``, PIP-54): only there do the gateway's
producers batch and its consumers acknowledge per batch index (gateway/backend/pulsar/
batching.py); the local stack has Pulsar's default, off. The raw client batches there too.
``--broker-config KEY=VALUE`` (repeatable) does the same with other broker settings, e.g.
``managedLedgerNewEntriesCheckDelayInMillis=0`` (a caught-up subscription is told of a new
entry at once instead of at the broker's next check, 10 ms by default) and the bookie's
``journalFlushWhenQueueEmpty=true`` (the standalone's bookie reads the same file).

Every phase is bounded (``--phase-timeout``, default 120 s) and the whole run stays on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import importlib.util
import os
import platform
import resource
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
from pamqp import base, body, commands, frame, header

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import rabbitmq  # noqa: E402  (bench/rabbitmq.py, next to this file)
from server_process import free_port, port_open, start_logged, stop, wait_ready  # noqa: E402

GATEWAY_EXE = REPO_DIR / ".venv" / "bin" / "starlight-rabbitmq"
ZK_PREFIX = "/starlight-rabbitmq"


BATCH_INDEX_ACKS = "acknowledgmentAtBatchIndexLevelEnabled=true\n"


def load_stack() -> ModuleType:
    """scripts/stack.py (imported by path, as its docstring asks)."""
    spec = importlib.util.spec_from_file_location("stack", REPO_DIR / "scripts" / "stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["stack"] = module
    spec.loader.exec_module(module)
    return module


# --- CPU accounting (/proc) --------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds spent busy by all cores since boot (/proc/stat, idle and iowait excluded)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    # guest time is already counted in user time
    return (sum(values[:8]) - idle) / CLK_TCK


def background_load(seconds: float = 3.0) -> float:
    """Cores busy on the machine over ``seconds`` (before a run: other people's work)."""
    start = machine_busy_seconds()
    time.sleep(seconds)
    return (machine_busy_seconds() - start) / seconds


def wait_for_quiet(max_wait: float, threshold: float = 0.3) -> float:
    """Sample the background load until it is below ``threshold`` cores or ``max_wait``
    seconds have passed; the last sample. Prints what it sees."""
    deadline = time.monotonic() + max_wait
    while True:
        load = background_load()
        if load < threshold or time.monotonic() >= deadline:
            verdict = "quiet" if load < threshold else "BUSY: figures will be pessimistic"
            print(f"background load: {load:.2f} of {os.cpu_count()} cores ({verdict})")
            return load
        print(f"background load {load:.2f} cores; waiting for < {threshold} ...", flush=True)
        time.sleep(5)


def find_pid(cmdline_part: str) -> int | None:
    """The first process whose command line contains ``cmdline_part``."""
    needle = cmdline_part.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue
    return None


def gateway_pids(supervisor: int) -> dict[str, int]:
    """The supervisor and its workers (its children), by name."""
    pids = {"gateway": supervisor}
    children: list[str] = []
    # /proc lists a process's children per thread that started them.
    for task in Path(f"/proc/{supervisor}/task").iterdir():
        with contextlib.suppress(OSError):
            children += (task / "children").read_text().split()
    for index, child in enumerate(sorted(children, key=int), start=1):
        pids[f"worker{index}"] = int(child)
    return pids


@dataclass
class CpuMeter:
    """CPU seconds per named process, this process, and the machine, between start and stop.

    ``children``, if set, names the CPU of this process's children that end (and are waited
    for) inside the measured block, e.g. a PerfTest JVM: /proc forgets a process once reaped,
    getrusage(RUSAGE_CHILDREN) remembers it.
    """

    pids: dict[str, int]
    children: str | None = None
    start: dict[str, float] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0

    def _sample(self) -> dict[str, float]:
        sample = {name: proc_cpu_seconds(pid) for name, pid in self.pids.items()}
        if self.children:
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            sample[self.children] = usage.ru_utime + usage.ru_stime
        sample["client"] = time.process_time()
        sample["machine"] = machine_busy_seconds()
        sample["wall"] = time.perf_counter()
        return sample

    def __enter__(self) -> CpuMeter:
        self.start = self._sample()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._sample()
        self.wall = end["wall"] - self.start["wall"]
        self.used = {k: end[k] - self.start[k] for k in end if k != "wall"}
        named = sum(v for k, v in self.used.items() if k != "machine")
        self.used["other"] = max(0.0, self.used["machine"] - named)

    def summary(self) -> str:
        names = (*self.pids, *([self.children] if self.children else []), "client", "other")
        order = [k for k in names if k in self.used]
        parts = [f"{k} {self.used[k]:.1f}" for k in order]
        return f"cpu s: {', '.join(parts)} (wall {self.wall:.1f})"


# --- Pulsar namespace and the gateway process --------------------------------------------------


@dataclass(frozen=True)
class Broker:
    """The Pulsar the run measures on, and its JVM's pid (None: not found)."""

    broker_url: str
    web_url: str
    zookeeper: str
    pid: int | None


@contextlib.contextmanager
def own_broker(stack: ModuleType, broker_config: str) -> Iterator[Broker]:
    """A standalone of the run's own with ``broker_config`` (tests/support/own_stack.py), with
    the local stack's JVM settings so that the two compare; stopped on exit."""
    sys.path.insert(0, str(REPO_DIR))
    from tests.support.own_stack import own_stack

    print("starting a Pulsar standalone of this run's own (free ports) ...", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="bench-pulsar-") as directory,
        own_stack(
            Path(directory), broker_config=broker_config, jvm_options=tuple(stack.JVM_MEMORY)
        ) as started,
    ):
        yield Broker(started.broker_url, started.web_url, started.zookeeper, started.pid)


@contextlib.contextmanager
def measured_broker(
    stack: ModuleType, *, batch_index_acks: bool, broker_config: Sequence[str] = ()
) -> Iterator[Broker]:
    """The Pulsar a run measures on: the local stack's (which must be up), or with
    ``batch_index_acks`` or ``broker_config`` (``key=value`` lines) a standalone of the run's
    own with those broker settings (the gateway's producers batch only where the broker keeps
    batch-index acknowledgements)."""
    if batch_index_acks or broker_config:
        lines = (BATCH_INDEX_ACKS if batch_index_acks else "") + "".join(
            f"{line}\n" for line in broker_config
        )
        with own_broker(stack, lines) as broker:
            yield broker
    else:
        pid = find_pid("PulsarStandaloneStarter")
        yield Broker(stack.BROKER_URL, stack.WEB_URL, stack.ZOOKEEPER, pid)


@contextlib.contextmanager
def fresh_namespace(web_url: str, zookeeper: str) -> Iterator[str]:
    """``public/bench-<random>``; on exit the namespace (forced) and its gateway metadata go."""
    name = f"bench-{uuid.uuid4().hex[:10]}"
    with httpx.Client(base_url=web_url, timeout=60) as admin:
        admin.put(f"/admin/v2/namespaces/public/{name}").raise_for_status()
        try:
            yield name
        finally:
            reply = admin.delete(f"/admin/v2/namespaces/public/{name}", params={"force": "true"})
            if reply.status_code >= 300:
                print(f"warning: deleting namespace public/{name}: HTTP {reply.status_code}")
            delete_gateway_metadata(zookeeper, f"public/{name}")


def entries_and_messages(web_url: str, namespace: str) -> tuple[int, int]:
    """Pulsar entries written and messages received by the topics of ``public/<namespace>``
    (internal stats' ``entriesAddedCounter``, stats' ``msgInCounter``): how well producers
    batched."""
    entries = messages = 0
    with httpx.Client(base_url=web_url, timeout=30) as admin:
        for topic in admin.get(f"/admin/v2/persistent/public/{namespace}").json():
            path = str(topic).replace("persistent://", "/admin/v2/persistent/")
            entries += int(admin.get(path + "/internalStats").json()["entriesAddedCounter"])
            messages += int(admin.get(path + "/stats").json()["msgInCounter"])
    return entries, messages


def print_entries_per_message(who: str, web_url: str, namespace: str) -> None:
    """``entries_and_messages``, printed as "<who> entries per message: ..."."""
    try:
        entries, messages = entries_and_messages(web_url, namespace)
    except (httpx.HTTPError, KeyError, ValueError) as error:
        print(f"{who} entries per message: not read ({error})")
        return
    per = f"{entries / messages:.3f}" if messages else "-"
    print(f"{who} entries per message: {per} ({entries:,} entries for {messages:,} messages)")


def delete_gateway_metadata(zookeeper: str, namespace: str) -> None:
    """Remove the gateway's ZooKeeper subtree of ``namespace`` (what outlives its deletion)."""
    from kazoo.client import KazooClient

    from gateway.metadata.paths import encode_name

    zk = KazooClient(hosts=zookeeper, timeout=10)
    zk.start(timeout=10)
    try:
        path = f"{ZK_PREFIX}/vhosts/{encode_name(namespace)}"
        if zk.exists(path):
            zk.delete(path, recursive=True)
    finally:
        zk.stop()
        zk.close()


@dataclass
class GatewayProcess:
    port: int
    pid: int
    log: Path


@contextlib.contextmanager
def gateway_process(
    broker_url: str,
    web_url: str,
    zookeeper: str,
    namespace: str,
    *,
    switch_interval: float | None = None,
    timeout: float = 60.0,
    extra_args: Sequence[str] = (),
    extra_conf: Sequence[str] = (),
) -> Iterator[GatewayProcess]:
    """``starlight-rabbitmq -c <temp conf>`` on a free loopback port, vhost ``/`` on
    ``public/<namespace>``; stopped with SIGINT (graceful), then SIGKILL if it lingers.

    ``switch_interval``: run the same entry point under ``sys.setswitchinterval`` (an
    experiment knob: how long pulsar-client's C++ callback threads may wait for the GIL).
    ``extra_args``: more command-line arguments, e.g. ``--workers 2``; ``extra_conf``: more
    ``key=value`` lines for its configuration file.
    """
    workdir = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    port = free_port()
    conf = workdir / "gateway.conf"
    conf.write_text(
        f"brokerServiceURL={broker_url}\n"
        f"brokerWebServiceURL={web_url}\n"
        f"configurationStoreServers={zookeeper}\n"
        f"amqpListeners=amqp://127.0.0.1:{port}\n"
        f"amqpDefaultNamespace={namespace}\n"
        "metricsListener=http://127.0.0.1:0\n" + "".join(f"{line}\n" for line in extra_conf)
    )
    log = workdir / "gateway.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARLIGHT_")}
    command = [str(GATEWAY_EXE), "-c", str(conf), *extra_args]
    if switch_interval is not None:
        command = [
            str(GATEWAY_EXE.parent / "python"),
            "-c",
            f"import sys; sys.setswitchinterval({switch_interval!r}); "
            "from gateway.cli import main; sys.exit(main(sys.argv[1:]))",
            "-c",
            str(conf),
            *extra_args,
        ]
    if os.environ.get("BENCH_CPROFILE"):
        # The gateway's trio thread under cProfile (written when it exits): call counts
        # per message, which a sampling profiler does not give.
        # (main() returns before the entry point's os._exit, so the stats get written.)
        command = [
            str(GATEWAY_EXE.parent / "python"),
            "-c",
            "import cProfile, sys; from gateway.cli import main; p = cProfile.Profile(); "
            "p.runcall(main, sys.argv[2:]); p.dump_stats(sys.argv[1])",
            os.environ["BENCH_CPROFILE"],
            *command[1:],
        ]
    proc = start_logged(command, log, cwd=REPO_DIR, env=env, new_session=False)
    try:
        wait_ready(proc, lambda: port_open(port), log=log, what="the gateway", timeout=timeout)
        yield GatewayProcess(port=port, pid=proc.pid, log=log)
    finally:
        stop(proc, signal.SIGINT)  # the gateway's graceful stop
        shutil.rmtree(workdir, ignore_errors=True)


# --- a minimal asyncio AMQP 0-9-1 client --------------------------------------------------------

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = b"\xce"
_FRAME_HEAD = struct.Struct(">BHI")
_CLASS_METHOD = struct.Struct(">I")
_TAG_BITS = struct.Struct(">QB")
_U64 = struct.Struct(">Q")
_ACK_FRAME = struct.Struct(
    ">BHIHHQBB"
)  # type, channel, size 13, class 60, method 80, tag, bits, end
BASIC_ACK = (60 << 16) | 80
BASIC_NACK = (60 << 16) | 120
BASIC_DELIVER = (60 << 16) | 60
CHANNEL = 1
MAX_FRAME = 131072


class AmqpError(RuntimeError):
    pass


class AmqpClient(asyncio.Protocol):
    """One connection, one channel (1). Use ``await AmqpClient.open(host, port)``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.inbox: asyncio.Queue[base.Frame | None] = asyncio.Queue()
        self.lost: BaseException | None = None
        self.frame_max = MAX_FRAME
        self.can_write = asyncio.Event()
        self.can_write.set()
        # publisher confirms: tags are 1, 2, ...; every tag < low is confirmed, plus acked_above
        self.low = 1
        self.acked_above: set[int] = set()
        self.confirmed = 0
        self.nacked = 0
        self.confirm_event = asyncio.Event()
        self.confirm_times: dict[int, int] | None = None  # tag -> send ns, when measuring
        self.confirm_latencies: list[int] = []
        # deliveries
        self.deliver_tag = 0
        self.body_left = 0
        self.body_head = b""
        self.on_delivery: Callable[[int, bytes], None] | None = None
        self.pending_acks: list[bytes] = []

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionResetError("connection closed by the server")
        self.inbox.put_nowait(None)
        self.confirm_event.set()
        self.can_write.set()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        pos, size_all = 0, len(buf)
        unpack_head, unpack_cm = _FRAME_HEAD.unpack_from, _CLASS_METHOD.unpack_from
        while size_all - pos >= 8:
            kind, _channel, size = unpack_head(buf, pos)
            end = pos + 7 + size
            if end >= size_all:
                break
            start = pos + 7
            if kind == FRAME_METHOD:
                (cm,) = unpack_cm(buf, start)
                if cm in (BASIC_ACK, BASIC_NACK):
                    tag, bits = _TAG_BITS.unpack_from(buf, start + 4)
                    if cm == BASIC_NACK:
                        self.nacked += 1
                    self._confirm(tag, bits & 1)
                elif cm == BASIC_DELIVER:
                    at = start + 4
                    at += 1 + buf[at]  # consumer tag
                    (self.deliver_tag,) = _U64.unpack_from(buf, at)
                else:
                    _, _, value = frame.unmarshal(bytes(buf[pos : end + 1]))
                    assert isinstance(value, base.Frame)
                    self._slow_method(value)
            elif kind == FRAME_HEADER:
                (self.body_left,) = _U64.unpack_from(buf, start + 4)
                self.body_head = b""
                if self.body_left == 0:
                    self._delivered()
            elif kind == FRAME_BODY:
                if not self.body_head:
                    self.body_head = bytes(buf[start : start + min(size, 16)])
                self.body_left -= size
                if self.body_left <= 0:
                    self._delivered()
            pos = end + 1
        del buf[:pos]
        if self.pending_acks and self.transport is not None:
            self.transport.write(b"".join(self.pending_acks))
            self.pending_acks.clear()

    def _slow_method(self, value: base.Frame) -> None:
        if isinstance(value, commands.Connection.Close):
            self.send(0, commands.Connection.CloseOk())
        self.inbox.put_nowait(value)

    def _confirm(self, tag: int, multiple: int) -> None:
        times = self.confirm_times
        now = time.perf_counter_ns() if times is not None else 0
        if multiple:
            if tag >= self.low:
                already = [t for t in self.acked_above if t <= tag]
                self.confirmed += tag - self.low + 1 - len(already)
                if times is not None:
                    for t in range(self.low, tag + 1):
                        sent = times.pop(t, None)
                        if sent is not None:
                            self.confirm_latencies.append(now - sent)
                self.acked_above.difference_update(already)
                self.low = tag + 1
        elif tag == self.low or (tag > self.low and tag not in self.acked_above):
            self.confirmed += 1
            if times is not None and tag in times:
                self.confirm_latencies.append(now - times.pop(tag))
            if tag == self.low:
                self.low += 1
            else:
                self.acked_above.add(tag)
        while self.low in self.acked_above:
            self.acked_above.remove(self.low)
            self.low += 1
        self.confirm_event.set()

    def _delivered(self) -> None:
        if self.on_delivery is not None:
            self.on_delivery(self.deliver_tag, self.body_head)

    def ack(self, tag: int) -> None:
        """Queue a basic.ack; written at the end of the current read."""
        self.pending_acks.append(_ACK_FRAME.pack(1, CHANNEL, 13, 60, 80, tag, 0, 0xCE))

    # requests
    def write(self, data: bytes) -> None:
        if self.lost is not None:
            raise AmqpError(f"connection lost: {self.lost}")
        assert self.transport is not None
        self.transport.write(data)

    def send(self, channel: int, value: base.Frame) -> None:
        self.write(frame.marshal(value, channel))

    async def expect(self, kind: type[base.Frame], timeout: float = 30.0) -> Any:
        value = await asyncio.wait_for(self.inbox.get(), timeout)
        if value is None:
            raise AmqpError(f"connection lost waiting for {kind.__name__}: {self.lost}")
        if isinstance(value, commands.Connection.Close | commands.Channel.Close):
            raise AmqpError(f"{value.name}: {value.reply_code} {value.reply_text}")
        if not isinstance(value, kind):
            raise AmqpError(f"expected {kind.__name__}, got {value.name}")
        return value

    async def call(self, value: base.Frame, reply: type[base.Frame]) -> Any:
        self.send(CHANNEL, value)
        return await self.expect(reply)

    @classmethod
    async def open(cls, host: str, port: int, vhost: str = "/") -> AmqpClient:
        loop = asyncio.get_running_loop()
        _, client = await loop.create_connection(cls, host, port)
        client.write(b"AMQP\x00\x00\x09\x01")
        await client.expect(commands.Connection.Start)
        client.send(
            0,
            commands.Connection.StartOk(
                client_properties={"product": "bench_gateway_vs_pulsar"},
                mechanism="PLAIN",
                response="\x00guest\x00guest",
            ),
        )
        tune = await client.expect(commands.Connection.Tune)
        client.frame_max = min(tune.frame_max or MAX_FRAME, MAX_FRAME)
        client.send(
            0,
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=client.frame_max, heartbeat=0
            ),
        )
        client.send(0, commands.Connection.Open(virtual_host=vhost))
        await client.expect(commands.Connection.OpenOk)
        await client.call(commands.Channel.Open(), commands.Channel.OpenOk)
        return client

    async def close(self) -> None:
        if self.lost is None and self.transport is not None:
            with contextlib.suppress(AmqpError, TimeoutError):
                self.send(0, commands.Connection.Close(200, "bye", 0, 0))
                await self.expect(commands.Connection.CloseOk, timeout=10)
        if self.transport is not None:
            self.transport.close()

    def message_frames(
        self, routing_key: str, payload: bytes, priority: int | None = None
    ) -> bytes:
        """Basic.Publish to the default exchange + content header (persistent, and
        ``priority`` if given) + body frames."""
        properties = commands.Basic.Properties(delivery_mode=2, priority=priority)
        parts = [
            frame.marshal(commands.Basic.Publish(exchange="", routing_key=routing_key), CHANNEL),
            frame.marshal(header.ContentHeader(0, len(payload), properties), CHANNEL),
        ]
        step = self.frame_max - 8
        for at in range(0, len(payload), step):
            parts.append(frame.marshal(body.ContentBody(payload[at : at + step]), CHANNEL))
        return b"".join(parts)

    async def wait_confirmed(self, target: int, deadline: float) -> None:
        while self.confirmed < target:
            if self.lost is not None:
                raise AmqpError(f"connection lost: {self.lost}")
            self.confirm_event.clear()
            await asyncio.wait_for(self.confirm_event.wait(), deadline - time.monotonic())


async def amqp_publish_confirmed(
    client: AmqpClient,
    queue: str,
    count: int,
    size: int,
    window: int,
    timeout: float,
    max_priority: int = 0,
    frames: list[bytes] | None = None,
) -> float:
    """Publish ``count`` messages with at most ``window`` unconfirmed; seconds until the last
    confirm. The client must be in confirm mode with no earlier publishes on the channel.
    With ``max_priority``, the messages' priorities cycle through 0..max_priority; with
    ``frames`` (each a whole publish: method, header and body frames), those in turn."""
    if frames is None:
        priorities = range(max_priority + 1) if max_priority else [None]
        frames = [client.message_frames(queue, b"x" * size, p) for p in priorities]
    blob, blobs = frames[0], frames
    deadline = time.monotonic() + timeout
    started = time.perf_counter()
    sent = 0
    while sent < count:
        room = window - (sent - client.confirmed)
        if room <= 0:
            client.confirm_event.clear()
            await asyncio.wait_for(client.confirm_event.wait(), deadline - time.monotonic())
            continue
        chunk = min(room, count - sent, 64)
        if len(blobs) > 1:
            client.write(b"".join(blobs[(sent + i) % len(blobs)] for i in range(chunk)))
        else:
            client.write(blob * chunk)
        sent += chunk
        if not client.can_write.is_set():
            await asyncio.wait_for(client.can_write.wait(), deadline - time.monotonic())
    await client.wait_confirmed(count, deadline)
    elapsed = time.perf_counter() - started
    if client.nacked:
        raise AmqpError(f"{client.nacked} publishes were nacked")
    return elapsed


async def amqp_consume(
    client: AmqpClient,
    queue: str,
    count: int,
    prefetch: int,
    timeout: float,
    arguments: dict[str, Any] | None = None,
) -> float:
    """basic.consume (with ``arguments``, e.g. a stream's offset) with prefetch, ack each
    delivery; seconds from consume to the last ack."""
    done = asyncio.Event()
    received = 0

    def on_delivery(tag: int, _head: bytes) -> None:
        nonlocal received
        received += 1
        client.ack(tag)
        if received >= count:
            done.set()

    await client.call(commands.Basic.Qos(prefetch_count=prefetch), commands.Basic.QosOk)
    client.on_delivery = on_delivery
    started = time.perf_counter()
    await client.call(
        commands.Basic.Consume(queue=queue, consumer_tag="bench", arguments=arguments),
        commands.Basic.ConsumeOk,
    )
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError:
        raise AmqpError(f"consume: {received} of {count} messages within {timeout:.0f} s") from None
    elapsed = time.perf_counter() - started
    client.on_delivery = None
    client.send(CHANNEL, commands.Basic.Cancel(consumer_tag="bench"))
    await client.expect(commands.Basic.CancelOk)
    return elapsed


@dataclass
class Latency:
    deliver_ns: list[int]
    confirm_ns: list[int]
    # CPU during the trickle: at a low rate every message wakes the threads on its path, and on
    # this machine a wake-up costs far more than at throughput (docs/performance.md).
    meter: CpuMeter | None = None

    @staticmethod
    def _fmt(values: list[int]) -> str:
        if not values:
            return "n/a"
        ms = sorted(v / 1e6 for v in values)
        p50 = statistics.median(ms)
        p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
        return f"{p50:.2f} / {p99:.2f} / {ms[-1]:.2f}"

    def deliver(self) -> str:
        return self._fmt(self.deliver_ns)

    def confirm(self) -> str:
        return self._fmt(self.confirm_ns)

    def cpu_per_message(self) -> str:
        """µs of CPU per message of each measured process (the client is this process)."""
        if self.meter is None or not self.deliver_ns:
            return "-"
        used = self.meter.used
        names = [k for k in self.meter.pids if k in used] + ["client"]
        per_message = 1e6 / len(self.deliver_ns)
        return ", ".join(f"{k} {used[k] * per_message:.0f}" for k in names)


async def amqp_latency(
    host: str, port: int, queue: str, count: int, rate: float, size: int, warmup: int
) -> Latency:
    """A trickle at ``rate``/s with a consumer attached; the body carries the send time."""
    publisher = await AmqpClient.open(host, port)
    consumer = await AmqpClient.open(host, port)
    try:
        await publisher.call(
            commands.Queue.Declare(queue=queue, durable=True), commands.Queue.DeclareOk
        )
        await publisher.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        deliver: list[int] = []
        got = 0
        total = warmup + count
        done = asyncio.Event()

        def on_delivery(tag: int, head: bytes) -> None:
            nonlocal got
            got += 1
            (sent,) = _U64.unpack_from(head)
            if got > warmup:
                deliver.append(time.perf_counter_ns() - sent)
            consumer.ack(tag)
            if got >= total:
                done.set()

        consumer.on_delivery = on_delivery
        await consumer.call(commands.Basic.Qos(prefetch_count=500), commands.Basic.QosOk)
        await consumer.call(
            commands.Basic.Consume(queue=queue, consumer_tag="lat"), commands.Basic.ConsumeOk
        )
        template = publisher.message_frames(queue, b"\0" * size)
        body_at = len(template) - size - 1
        publisher.confirm_times = {}
        interval = 1.0 / rate
        started = time.perf_counter()
        for i in range(total):
            delay = started + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.perf_counter_ns()
            if i >= warmup:
                publisher.confirm_times[i + 1] = now
            publisher.write(template[:body_at] + _U64.pack(now) + template[body_at + 8 :])
        await asyncio.wait_for(done.wait(), 60 + total / rate)
        await publisher.wait_confirmed(total, time.monotonic() + 30)
        await publisher.call(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk)
        return Latency(deliver, list(publisher.confirm_latencies))
    finally:
        await consumer.close()
        await publisher.close()


@dataclass
class Rates:
    """msg/s per phase and repetition, with the CPU meter of each; tables show the best.

    Phases: ``publish``, ``consume``, and ``both publish`` / ``both consume`` (publishing while
    a consumer drains the same queue; one meter for the two).
    """

    samples: dict[str, list[tuple[float, CpuMeter | None]]] = field(default_factory=dict)
    latency: Latency | None = None
    backlog: int | None = None

    def record(self, phase: str, rate: float, meter: CpuMeter | None) -> None:
        self.samples.setdefault(phase, []).append((rate, meter))

    def best(self, phase: str) -> float:
        return max((rate for rate, _ in self.samples.get(phase, [])), default=0.0)

    def best_meter(self, phase: str) -> CpuMeter | None:
        runs = self.samples.get(phase, [])
        return max(runs, key=lambda run: run[0])[1] if runs else None

    def all_rates(self, phase: str) -> str:
        return ", ".join(f"{rate:,.0f}" for rate, _ in self.samples.get(phase, []))

    def client_us_per_msg(self, count: int) -> str:
        parts = []
        for phase in ("publish", "consume"):
            meter = self.best_meter(phase)
            if meter is not None:
                parts.append(f"{meter.used['client'] / count * 1e6:.0f}")
        return " / ".join(parts) or "n/a"


async def amqp_both(
    host: str, port: int, queue: str, args: argparse.Namespace
) -> tuple[float, float]:
    """Publish (confirmed, windowed) and consume (prefetch, acks) at once on two connections;
    seconds of the publisher (to its last confirm) and of the consumer (consume to last ack)."""
    publisher = await AmqpClient.open(host, port)
    consumer = await AmqpClient.open(host, port)
    try:
        await publisher.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        consuming = asyncio.create_task(
            amqp_consume(consumer, queue, args.count, args.prefetch, args.phase_timeout)
        )
        await asyncio.sleep(0)
        publish_seconds = await amqp_publish_confirmed(
            publisher, queue, args.count, args.size, args.window, args.phase_timeout
        )
        consume_seconds = await consuming
        return publish_seconds, consume_seconds
    finally:
        await consumer.close()
        await publisher.close()


Profiler = Callable[[str], contextlib.AbstractContextManager[None]]


def no_profiler(_phase: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


class AmqpRunner:
    """The AMQP phases against one server, a repetition at a time (so that they can alternate
    with the raw client's): warm-up, then per round publish-confirmed, consume and both at
    once, then the latency trickle."""

    def __init__(
        self,
        host: str,
        port: int,
        args: argparse.Namespace,
        pids: dict[str, int],
        profiler: Profiler = no_profiler,
    ) -> None:
        self.host, self.port, self.args, self.pids = host, port, args, pids
        self.profiler = profiler
        self.rates = Rates()
        self.queue = f"bench-{uuid.uuid4().hex[:8]}"

    async def warm_up(self) -> None:
        args = self.args
        client = await AmqpClient.open(self.host, self.port)
        try:
            arguments = {"x-max-priority": args.max_priority} if args.max_priority else None
            await client.call(
                commands.Queue.Declare(queue=self.queue, durable=True, arguments=arguments),
                commands.Queue.DeclareOk,
            )
            await client.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
            if args.warmup:
                await amqp_publish_confirmed(
                    client,
                    self.queue,
                    args.warmup,
                    args.size,
                    args.window,
                    args.phase_timeout,
                    args.max_priority,
                )
                await amqp_consume(
                    client, self.queue, args.warmup, args.prefetch, args.phase_timeout
                )
        finally:
            await client.close()

    async def round(self, rep: int) -> None:
        args, rates, queue = self.args, self.rates, self.queue
        # the first repetition is the profiled one (py-spy slows it down a little)
        profile = self.profiler if rep == 0 else no_profiler
        # a fresh connection: delivery tags and confirm counts start at 1 again
        client = await AmqpClient.open(self.host, self.port)
        try:
            await client.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
            with profile("publish"), CpuMeter(self.pids) as meter:
                seconds = await amqp_publish_confirmed(
                    client,
                    queue,
                    args.count,
                    args.size,
                    args.window,
                    args.phase_timeout,
                    args.max_priority,
                )
            rates.record("publish", args.count / seconds, meter)
            with profile("consume"), CpuMeter(self.pids) as meter:
                seconds = await amqp_consume(
                    client, queue, args.count, args.prefetch, args.phase_timeout
                )
            rates.record("consume", args.count / seconds, meter)
        finally:
            await client.close()
        if args.both:
            with profile("both"), CpuMeter(self.pids) as meter:
                pub_seconds, cons_seconds = await amqp_both(self.host, self.port, queue, args)
            rates.record("both publish", args.count / pub_seconds, meter)
            rates.record("both consume", args.count / cons_seconds, meter)

    async def finish(self) -> Rates:
        """Delete the queue, run the latency trickle; the rates of every round."""
        args = self.args
        client = await AmqpClient.open(self.host, self.port)
        try:
            await client.call(commands.Queue.Delete(queue=self.queue), commands.Queue.DeleteOk)
        finally:
            await client.close()
        if args.latency_count:
            with CpuMeter(self.pids) as meter:
                self.rates.latency = await amqp_latency(
                    self.host,
                    self.port,
                    f"{self.queue}-lat",
                    args.latency_count,
                    args.latency_rate,
                    args.size,
                    args.latency_warmup,
                )
            self.rates.latency.meter = meter
        return self.rates


async def run_amqp(
    host: str,
    port: int,
    args: argparse.Namespace,
    pids: dict[str, int],
    profiler: Profiler = no_profiler,
) -> Rates:
    """Every AMQP phase against one server (RabbitMQ's column)."""
    runner = AmqpRunner(host, port, args, pids, profiler)
    await runner.warm_up()
    for rep in range(args.repeat):
        await runner.round(rep)
    return await runner.finish()


async def aio_pika_rates(url: str, args: argparse.Namespace, pids: dict[str, int]) -> Rates:
    """aio-pika doing the publish and consume phases (to show why the benchmark has its own
    client): ``window`` confirms in flight through a semaphore, prefetch, one ack each."""
    import aio_pika

    rates = Rates()
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        await channel.set_qos(prefetch_count=args.prefetch)
        queue = await channel.declare_queue(f"aio-pika-{uuid.uuid4().hex[:8]}", durable=True)
        payload = b"x" * args.size
        slots = asyncio.Semaphore(args.window)

        async def publish_one() -> None:
            async with slots:
                await channel.default_exchange.publish(
                    aio_pika.Message(payload, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=queue.name,
                )

        with CpuMeter(pids) as meter:
            started = time.perf_counter()
            await asyncio.wait_for(
                asyncio.gather(*(publish_one() for _ in range(args.count))), args.phase_timeout
            )
            publish_rate = args.count / (time.perf_counter() - started)
        rates.record("publish", publish_rate, meter)
        received = 0
        done = asyncio.Event()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal received
            await message.ack()
            received += 1
            if received >= args.count:
                done.set()

        with CpuMeter(pids) as meter:
            started = time.perf_counter()
            tag = await queue.consume(on_message)
            await asyncio.wait_for(done.wait(), args.phase_timeout)
            consume_rate = args.count / (time.perf_counter() - started)
        rates.record("consume", consume_rate, meter)
        await queue.cancel(tag)
        await queue.delete(if_unused=False, if_empty=False)
    finally:
        await connection.close()
    return rates


# --- raw pulsar-client --------------------------------------------------------------------------


def raw_producer(client: Any, topic: str, *, batching: bool) -> Any:
    # The gateway's producer settings (gateway/pulsar/producer.py ProducerOptions), but blocking
    # when 1000 are pending instead of failing: this loop has nothing better to do. The gateway
    # batches only where the broker keeps batch-index acknowledgements (gateway/backend/pulsar/
    # batching.py): ``batching`` says whether this run's raw client does the same work.
    return client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_publish_delay_ms=1,
        batching_max_messages=1000,
        batching_max_allowed_size_in_bytes=128 * 1024,
        max_pending_messages=1000,
        block_if_queue_full=True,
    )


def raw_publish(
    producer: Any, count: int, size: int, timeout: float, *, keep_thread_state: bool = False
) -> float:
    """``keep_thread_state``: the callback does what the gateway's do first
    (gateway.pulsar.bridge.keep_thread_state), to show what that alone is worth to a plain
    pulsar-client application."""
    import pulsar

    from gateway.pulsar.bridge import keep_thread_state as keep_state

    payload = b"x" * size
    done = threading.Event()
    lock = threading.Lock()
    state = {"acked": 0, "failed": 0}

    def callback(result: Any, _msg_id: Any) -> None:
        if keep_thread_state:
            keep_state()
        with lock:
            state["acked"] += 1
            if result != pulsar.Result.Ok:
                state["failed"] += 1
            if state["acked"] >= count:
                done.set()

    started = time.perf_counter()
    for _ in range(count):
        producer.send_async(payload, callback)
    producer.flush()
    if not done.wait(timeout):
        raise RuntimeError(f"raw publish: {state['acked']} of {count} within {timeout:.0f} s")
    elapsed = time.perf_counter() - started
    if state["failed"]:
        raise RuntimeError(f"raw publish: {state['failed']} sends failed")
    return elapsed


def raw_consume(client: Any, topic: str, subscription: str, count: int, timeout: float) -> float:
    import pulsar

    started = time.perf_counter()
    consumer = client.subscribe(
        topic,
        subscription,
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    deadline = time.monotonic() + timeout
    try:
        for got in range(count):
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise RuntimeError(f"raw consume: {got} of {count} within {timeout:.0f} s")
            consumer.acknowledge(consumer.receive(timeout_millis=left_ms))
        return time.perf_counter() - started
    finally:
        consumer.close()  # flushes the grouped acks


def raw_both(
    client: Any, topic: str, count: int, size: int, timeout: float, *, batching: bool
) -> tuple[float, float]:
    """Producer and Shared consumer at once; seconds of each (as raw_publish / raw_consume)."""
    import pulsar

    consumer = client.subscribe(topic, "both", consumer_type=pulsar.ConsumerType.Shared)
    producer = raw_producer(client, topic, batching=batching)
    finished: list[float] = []
    failures: list[BaseException] = []

    def receive_all() -> None:
        try:
            deadline = time.monotonic() + timeout
            for _ in range(count):
                left_ms = max(1, int((deadline - time.monotonic()) * 1000))
                consumer.acknowledge(consumer.receive(timeout_millis=left_ms))
            finished.append(time.perf_counter())
        except BaseException as exc:
            failures.append(exc)

    receiver = threading.Thread(target=receive_all, name="raw-both", daemon=True)
    started = time.perf_counter()
    receiver.start()
    try:
        publish_seconds = raw_publish(producer, count, size, timeout)
        receiver.join(timeout)
    finally:
        producer.close()
        consumer.close()
    if failures or not finished:
        raise RuntimeError(f"raw consumer (both at once) failed: {failures[:1]!r}")
    return publish_seconds, finished[0] - started


def raw_latency(
    client: Any, topic: str, count: int, rate: float, size: int, warmup: int, *, batching: bool
) -> Latency:
    import pulsar

    consumer = client.subscribe(
        topic, "lat", consumer_type=pulsar.ConsumerType.Shared
    )  # attached before the first send
    producer = raw_producer(client, topic, batching=batching)
    total = warmup + count
    deliver: list[int] = []
    confirm: list[int] = []
    failures: list[BaseException] = []

    def receive_all() -> None:
        try:
            for i in range(total):
                msg = consumer.receive(timeout_millis=int((60 + total / rate) * 1000))
                now = time.perf_counter_ns()
                if i >= warmup:
                    deliver.append(now - _U64.unpack_from(msg.data())[0])
                consumer.acknowledge(msg)
        except BaseException as exc:
            failures.append(exc)

    receiver = threading.Thread(target=receive_all, name="raw-latency", daemon=True)
    receiver.start()
    padding = b"\0" * (size - 8)
    interval = 1.0 / rate
    started = time.perf_counter()
    for i in range(total):
        delay = started + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        now = time.perf_counter_ns()

        def confirmed(
            _result: Any, _msg_id: Any, sent: int = now, measured: bool = i >= warmup
        ) -> None:
            if measured:
                confirm.append(time.perf_counter_ns() - sent)

        producer.send_async(_U64.pack(now) + padding, confirmed)
    producer.flush()
    receiver.join(90 + total / rate)
    producer.close()
    consumer.close()
    if failures:
        raise RuntimeError(f"raw latency consumer failed: {failures[0]!r}")
    return Latency(deliver, confirm)


def raw_batches(args: argparse.Namespace) -> bool:
    """Whether the raw client's producers batch: as the gateway's do (on every broker, unless
    ``--no-batching``), or never (``--raw-batching never``: one entry per message, which costs
    the broker more per message than the gateway's batches)."""
    return args.raw_batching == "as-gateway" and not args.no_batching


class RawRunner:
    """The raw pulsar-client phases, a repetition at a time (see AmqpRunner)."""

    def __init__(
        self, broker_url: str, namespace: str, args: argparse.Namespace, pids: dict[str, int]
    ) -> None:
        import pulsar

        self.namespace, self.args, self.pids = namespace, args, pids
        self.rates = Rates()
        self.client = pulsar.Client(broker_url, logger=_quiet_pulsar_logger())
        self.batching = raw_batches(args)

    def warm_up(self) -> None:
        args = self.args
        if args.warmup:
            warm = f"persistent://public/{self.namespace}/raw-warmup"
            producer = raw_producer(self.client, warm, batching=self.batching)
            raw_publish(producer, args.warmup, args.size, args.phase_timeout)
            producer.close()
            raw_consume(self.client, warm, "bench", args.warmup, args.phase_timeout)

    def round(self, rep: int) -> None:
        args, rates, client = self.args, self.rates, self.client
        local = f"raw-tput-{rep}"
        topic = f"persistent://public/{self.namespace}/{local}"
        producer = raw_producer(client, topic, batching=self.batching)
        with CpuMeter(self.pids) as meter:
            seconds = raw_publish(producer, args.count, args.size, args.phase_timeout)
        producer.close()
        rates.record("publish", args.count / seconds, meter)
        producer = raw_producer(client, f"{topic}-kept", batching=self.batching)
        seconds = raw_publish(
            producer, args.count, args.size, args.phase_timeout, keep_thread_state=True
        )
        producer.close()
        rates.record("publish kept", args.count / seconds, None)
        with CpuMeter(self.pids) as meter:
            seconds = raw_consume(client, topic, "bench", args.count, args.phase_timeout)
        rates.record("consume", args.count / seconds, meter)
        rates.backlog = (rates.backlog or 0) + (
            subscription_backlog(args.web_url, f"public/{self.namespace}/{local}") or 0
        )
        if args.both:
            with CpuMeter(self.pids) as meter:
                pub_seconds, cons_seconds = raw_both(
                    client,
                    f"persistent://public/{self.namespace}/raw-both-{rep}",
                    args.count,
                    args.size,
                    args.phase_timeout,
                    batching=self.batching,
                )
            rates.record("both publish", args.count / pub_seconds, meter)
            rates.record("both consume", args.count / cons_seconds, meter)

    def finish(self) -> Rates:
        args = self.args
        try:
            if args.latency_count:
                with CpuMeter(self.pids) as meter:
                    self.rates.latency = raw_latency(
                        self.client,
                        f"persistent://public/{self.namespace}/raw-lat",
                        args.latency_count,
                        args.latency_rate,
                        args.size,
                        args.latency_warmup,
                        batching=self.batching,
                    )
                self.rates.latency.meter = meter
        finally:
            self.client.close()
        return self.rates


async def run_pulsar_pair(
    raw: RawRunner | None, gateway: AmqpRunner | None, repeat: int
) -> dict[str, Rates]:
    """The raw client's and the gateway's repetitions alternate (raw, gateway, raw, ...), so
    that each pair sees the same machine: a 2-core VM's speed drifts by tens of percent within
    minutes, and the per-round ratios are what the comparison rests on."""
    results: dict[str, Rates] = {}
    if raw is not None:
        raw.warm_up()
    if gateway is not None:
        await gateway.warm_up()
    for rep in range(repeat):
        if raw is not None:
            raw.round(rep)  # blocks the event loop, which has nothing else to do meanwhile
        if gateway is not None:
            await gateway.round(rep)
    if raw is not None:
        results["raw"] = raw.finish()
    if gateway is not None:
        results["gateway"] = await gateway.finish()
    return results


def _quiet_pulsar_logger() -> Any:
    import logging

    logger = logging.getLogger("bench.pulsar")
    logger.setLevel(logging.WARNING)
    return logger


def subscription_backlog(web_url: str, topic_path: str, wait: float = 5.0) -> int | None:
    """Sum of msgBacklog over the topic's subscriptions, polled until 0 (acks are grouped)."""
    deadline = time.monotonic() + wait
    backlog: int | None = None
    with httpx.Client(base_url=web_url, timeout=10) as admin:
        while True:
            reply = admin.get(f"/admin/v2/persistent/{topic_path}/stats")
            if reply.status_code != 200:
                return None
            subs = reply.json().get("subscriptions", {})
            backlog = sum(int(s.get("msgBacklog", 0)) for s in subs.values())
            if backlog == 0 or time.monotonic() > deadline:
                return backlog
            time.sleep(0.25)


# --- py-spy -------------------------------------------------------------------------------------


def add_gateway_switches(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-compiled",
        action="store_true",
        help="start the gateway with gatewayCompiledHotPath=false: pulsar-client's binding "
        "for every per-message call instead of the compiled module (docs/pulsar-layer.md)",
    )
    parser.add_argument(
        "--allocator",
        choices=["auto", "jemalloc", "system"],
        help="start the gateway with this gatewayMemoryAllocator (default: the gateway's, "
        "auto: jemalloc where the system has it)",
    )
    parser.add_argument(
        "--no-batching",
        action="store_true",
        help="start the gateway with amqpBatchingEnabled=false: one Pulsar entry per message",
    )


def add_broker_config_switch(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="measure on a Pulsar standalone of the run's own (free ports, the local stack's "
        "memory settings, ~30 s to start) with this broker setting, e.g. "
        "managedLedgerNewEntriesCheckDelayInMillis=0; repeat for several",
    )


def gateway_conf(args: argparse.Namespace) -> list[str]:
    """The configuration lines the command line asks for (add_gateway_switches)."""
    lines = ["gatewayCompiledHotPath=false"] if args.no_compiled else []
    if args.allocator is not None:
        lines.append(f"gatewayMemoryAllocator={args.allocator}")
    if args.no_batching:
        lines.append("amqpBatchingEnabled=false")
    return lines


def allocator_of(pid: int) -> str:
    """The memory allocator process ``pid`` runs on (gateway/allocator.py)."""
    sys.path.insert(0, str(REPO_DIR))
    from gateway.allocator import in_use

    maps = Path(f"/proc/{pid}/maps")
    return in_use(maps) if maps.exists() else "unknown"


def py_spy_exe() -> str | None:
    found = shutil.which("py-spy") or str(REPO_DIR / ".venv" / "bin" / "py-spy")
    return found if Path(found).exists() else None


@contextlib.contextmanager
def py_spy(exe: str, pid: int, out: Path) -> Iterator[None]:
    """Record ``pid`` with py-spy (raw collapsed stacks) while the block runs."""
    proc = subprocess.Popen(
        [
            exe,
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--output",
            str(out),
            "--rate",
            "200",
            # Inside pulsar-client's C++ calls too (needs to pause the process per sample).
            *(["--native"] if os.environ.get("BENCH_PROFILE_NATIVE") else ["--nonblocking"]),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.0)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if not out.exists():
            print(f"note: py-spy wrote nothing: {err.decode(errors='replace').strip()[-300:]}")


def py_spy_profiler(exe: str, pid: int, directory: Path, summaries: dict[str, str]) -> Profiler:
    """Profile each phase into ``directory/gateway-<phase>.txt``; summaries by phase."""

    @contextlib.contextmanager
    def profile(phase: str) -> Iterator[None]:
        out = directory / f"gateway-{phase}.txt"
        with py_spy(exe, pid, out):
            yield
        if out.exists():
            summaries[phase] = profile_summary(out)

    return profile


def profile_summary(collapsed: Path, top: int = 20) -> str:
    """Top functions by own samples and by inclusive samples from py-spy's raw output."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        # A busy thread without Python frames: pulsar-client's C++ threads at work.
        frames = [f for f in stack.split(";") if f] or ["<C++ thread, no Python frames> ()"]
        own[_short(frames[-1])] += count
        for name in {_short(f) for f in frames}:
            incl[name] += count
    if not total:
        return "no samples"
    lines = [f"py-spy: {total} samples of the gateway (all threads, idle ones excluded)", "own:"]
    lines += [f"  {n / total:6.1%}  {name}" for name, n in own.most_common(top)]
    lines.append("inclusive:")
    lines += [f"  {n / total:6.1%}  {name}" for name, n in incl.most_common(top)]
    return "\n".join(lines)


def _short(frame_text: str) -> str:
    # "function (path/to/file.py:123)" -> "function (file.py)"
    name, _, where = frame_text.partition(" (")
    where = where.rstrip(")")
    file_part = where.rsplit(":", 1)[0]
    marker = "/gateway/"
    if marker in file_part:
        file_part = "gateway/" + file_part.split(marker, 1)[1]
    else:
        file_part = Path(file_part).name
    return f"{name} ({file_part})"


# --- the run -------------------------------------------------------------------------------------


def fmt_rate(value: float) -> str:
    return f"{value:,.0f}" if value else "-"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def machine_line() -> str:
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({model}), {mem:.0f} GiB, Python {platform.python_version()}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


def print_report(args: argparse.Namespace, results: dict[str, Rates], notes: list[str]) -> None:
    raw, gw, rmq = results.get("raw"), results.get("gateway"), results.get("rabbitmq")
    print()
    print(
        f"== {args.count:,} messages of {args.size} B; AMQP confirm window {args.window}, "
        f"prefetch {args.prefetch}; warm-up {args.warmup}; best of {args.repeat} =="
    )
    cols = [
        (name, r)
        for name, r in (
            ("raw pulsar-client", raw),
            ("gateway", gw),
            ("RabbitMQ (same client)", rmq),
            ("aio-pika vs RabbitMQ", results.get("aio-pika")),
        )
        if r is not None
    ]
    header_line = "| | " + " | ".join(name for name, _ in cols)
    if raw and gw:
        header_line += " | gateway/raw"
    if rmq and gw:
        header_line += " | gateway/RabbitMQ"
    print(header_line + " |")
    print("|---" * header_line.count("|") + "|")

    def row(label: str, get: Callable[[Rates], float]) -> None:
        line = f"| {label} | " + " | ".join(fmt_rate(get(r)) for _, r in cols)
        if raw and gw:
            line += f" | {ratio(get(gw), get(raw))}"
        if rmq and gw:
            line += f" | {ratio(get(gw), get(rmq))}"
        print(line + " |")

    phases = {
        "publish": "publish, confirmed (msg/s)",
        "consume": "consume + ack (msg/s)",
        "both publish": "both at once: publish (msg/s)",
        "both consume": "both at once: consume (msg/s)",
    }
    for phase, label in phases.items():
        if any(phase in r.samples for _, r in cols):
            row(label, functools.partial(Rates.best, phase=phase))
    if raw and gw and "publish kept" in raw.samples:
        # The raw client with the one trick the gateway plays on pulsar-client (its callback
        # threads keep their Python thread state): the stricter ceiling.
        kept = raw.best("publish kept")
        cells = [
            fmt_rate(kept if r is raw else r.best("publish") if r is gw else 0.0) for _, r in cols
        ]
        cells.append(ratio(gw.best("publish"), kept))
        if rmq:
            cells.append("")
        print(f"| publish, raw with thread states kept (msg/s) | {' | '.join(cells)} |")
    if any(r.latency for _, r in cols):
        print(
            f"| deliver latency p50/p99/max ms ({args.latency_count} at {args.latency_rate:g}/s) | "
            + " | ".join(r.latency.deliver() if r.latency else "-" for _, r in cols)
            + " |"
        )
        print(
            "| confirm latency p50/p99/max ms | "
            + " | ".join(r.latency.confirm() if r.latency else "-" for _, r in cols)
            + " |"
        )
        print(
            "| CPU µs/msg during the latency trickle | "
            + " | ".join(r.latency.cpu_per_message() if r.latency else "-" for _, r in cols)
            + " |"
        )
    print(
        "| client CPU µs/msg (publish / consume) | "
        + " | ".join(r.client_us_per_msg(args.count) for _, r in cols)
        + " |"
    )
    if raw and gw:
        print()
        print("gateway/raw of each round (the two ran back to back), and their median:")
        for label, raw_phase, gw_phase in (
            ("publish", "publish", "publish"),
            ("publish vs raw with thread states kept", "publish kept", "publish"),
            ("consume", "consume", "consume"),
            ("both publish", "both publish", "both publish"),
        ):
            pairs = list(
                zip(raw.samples.get(raw_phase, []), gw.samples.get(gw_phase, []), strict=False)
            )
            if pairs:
                ratios = [g / r for (r, _), (g, _) in pairs]
                listed = ", ".join(f"{x:.2f}" for x in ratios)
                print(f"  {label}: {listed}  (median {statistics.median(ratios):.2f})")
    if gw:
        # The deciding figure on a shared machine: what each message cost the gateway process
        # (all its threads), which other load disturbs far less than msg/s.
        print()
        print("gateway CPU µs per message, each repetition (median):")
        for phase in ("publish", "consume", "both publish"):
            runs = gw.samples.get(phase, [])
            costs = [
                meter.used["gateway"] / args.count * 1e6
                for _, meter in runs
                if meter is not None and "gateway" in meter.used
            ]
            if costs:
                listed = ", ".join(f"{c:.0f}" for c in costs)
                per = " (publish + consume)" if phase == "both publish" else ""
                print(f"  {phase}{per}: {listed}  (median {statistics.median(costs):.0f})")
    print()
    print("every repetition (msg/s), and the CPU seconds of the best one:")
    for name, r in cols:
        for phase in (*phases, "publish kept"):
            if phase in r.samples:
                print(f"{name:>22} {phase:<12} {r.all_rates(phase)}")
        for phase in ("publish", "consume", "both publish"):
            meter = r.best_meter(phase)
            if meter is not None:
                print(f"{name:>22} {phase.split()[0]:<12} {meter.summary()}")
        if r.backlog is not None:
            print(f"{name:>22} backlog after consume: {r.backlog}")
    for note in notes:
        print(f"note: {note}")


def run_pulsar_phases(
    broker: Broker,
    args: argparse.Namespace,
    spy: str | None,
    results: dict[str, Rates],
    notes: list[str],
) -> None:
    """The raw client's and the gateway's phases on ``broker``, in a fresh namespace."""
    args.web_url = broker.web_url
    with fresh_namespace(broker.web_url, broker.zookeeper) as namespace:
        print(f"namespace public/{namespace} on {broker.broker_url}")
        entries = "batched entries" if raw_batches(args) else "one entry per message"
        notes.append(f"the raw client's producers publish {entries} (--raw-batching)")
        with contextlib.ExitStack() as running:
            gateway: AmqpRunner | None = None
            summaries: dict[str, str] = {}
            if not args.no_gateway:
                gw = running.enter_context(
                    gateway_process(
                        broker.broker_url,
                        broker.web_url,
                        broker.zookeeper,
                        namespace,
                        switch_interval=args.switch_interval,
                        extra_conf=gateway_conf(args),
                    )
                )
                pids = {"gateway": gw.pid}
                if broker.pid:
                    pids["pulsar"] = broker.pid
                profiler: Profiler = no_profiler
                if args.profile is not None and spy is not None:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    profiler = py_spy_profiler(spy, gw.pid, args.profile, summaries)
                gateway = AmqpRunner("127.0.0.1", gw.port, args, pids, profiler)
            raw: RawRunner | None = None
            if not args.no_raw:
                pids = {"pulsar": broker.pid} if broker.pid else {}
                raw = RawRunner(broker.broker_url, namespace, args, pids)
            print("raw pulsar-client and gateway, alternating repetitions ...", flush=True)
            results.update(asyncio.run(run_pulsar_pair(raw, gateway, args.repeat)))
            for phase, summary in summaries.items():
                notes.append(f"gateway profile, {phase} phase:\n{summary}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--count", type=int, default=20_000, help="messages per phase")
    parser.add_argument("-s", "--size", type=int, default=1024, help="body bytes (>= 16)")
    parser.add_argument(
        "-r", "--repeat", type=int, default=3, help="repetitions of the throughput phases (best)"
    )
    parser.add_argument("--window", type=int, default=500, help="unconfirmed publishes in flight")
    parser.add_argument("--prefetch", type=int, default=500, help="basic.qos prefetch count")
    parser.add_argument(
        "--max-priority",
        type=int,
        default=0,
        help="declare the AMQP queue with x-max-priority N and publish priorities 0..N in turn",
    )
    parser.add_argument("--warmup", type=int, default=2000, help="unmeasured messages first")
    parser.add_argument(
        "--no-both", dest="both", action="store_false", help="skip publish+consume at once"
    )
    parser.add_argument("--latency-count", type=int, default=1000, help="0 skips latency")
    parser.add_argument("--latency-rate", type=float, default=200.0, help="messages/s")
    parser.add_argument(
        "--latency-warmup",
        type=int,
        default=200,
        help="unmeasured messages at the start of the trickle (both sides, on a fresh queue or "
        "topic): the gateway creates a queue's producer on its first publish (~80 ms here, "
        "bench_first_publish.py), the raw client before its first send; with too few, the "
        "messages sent meanwhile make the gateway's p99",
    )
    parser.add_argument("--phase-timeout", type=float, default=120.0, help="seconds per phase")
    parser.add_argument("--no-raw", action="store_true", help="skip the raw pulsar-client run")
    parser.add_argument("--no-gateway", action="store_true", help="skip the gateway run")
    parser.add_argument(
        "--no-rabbitmq", action="store_true", help="skip the same client against RabbitMQ"
    )
    parser.add_argument(
        "--aio-pika",
        action="store_true",
        help="also run aio-pika's publish and consume against RabbitMQ (its ceiling)",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS for the machine's load to drop below 0.3 cores before starting",
    )
    add_gateway_switches(parser)
    add_broker_config_switch(parser)
    parser.add_argument(
        "--switch-interval",
        type=float,
        metavar="SECONDS",
        help="run the gateway under sys.setswitchinterval(SECONDS) (default: Python's 0.005)",
    )
    parser.add_argument(
        "--batch-index-acks",
        action="store_true",
        help="measure on a Pulsar standalone of the run's own whose broker keeps batch-index "
        "acknowledgements (acknowledgmentAtBatchIndexLevelEnabled=true): the gateway batches "
        "only there",
    )
    parser.add_argument(
        "--raw-batching",
        choices=("as-gateway", "never"),
        default="as-gateway",
        help="the raw client's producers batch as the gateway's do (as-gateway: on every "
        "broker, unless --no-batching) or never (one entry per message)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="record the gateway with py-spy in each throughput phase (DIR/gateway-<phase>.txt, "
        "collapsed stacks) and print the top functions; py-spy costs the machine some CPU",
    )
    args = parser.parse_args(argv)
    if args.size < 16:
        parser.error("--size must be at least 16 (the latency runs put a timestamp in the body)")

    spy = py_spy_exe() if args.profile is not None else None
    if args.profile is not None and spy is None:
        parser.error("--profile needs py-spy on PATH or in .venv/bin (pip install py-spy)")
    stack = load_stack()
    notes: list[str] = []
    results: dict[str, Rates] = {}
    print(f"machine: {machine_line()}")
    wait_for_quiet(args.wait_quiet)
    if not (args.no_raw and args.no_gateway):
        own = args.batch_index_acks or args.broker_config
        if not own and not stack.is_up():
            print("the local stack is not up: python3 scripts/stack.py up", file=sys.stderr)
            return 2
        with measured_broker(
            stack, batch_index_acks=args.batch_index_acks, broker_config=args.broker_config
        ) as broker:
            run_pulsar_phases(broker, args, spy, results, notes)
    if not args.no_rabbitmq:
        reason = rabbitmq.unavailable_reason()
        if reason:
            notes.append(f"RabbitMQ column skipped: {reason}")
        else:
            print(f"RabbitMQ {rabbitmq.version()} (same AMQP client) ...", flush=True)
            try:
                with rabbitmq.local_rabbitmq() as node:
                    results["rabbitmq"] = asyncio.run(
                        run_amqp("127.0.0.1", node.port, args, {"rabbitmq": node.pid})
                    )
                    if args.aio_pika:
                        print("aio-pika against RabbitMQ ...", flush=True)
                        results["aio-pika"] = asyncio.run(
                            aio_pika_rates(node.amqp_url, args, {"rabbitmq": node.pid})
                        )
            except rabbitmq.RabbitMQUnavailable as exc:
                notes.append(f"RabbitMQ column skipped: {exc}")
    print_report(args, results, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
