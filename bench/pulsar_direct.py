"""PerfTest's throughput load put straight onto Pulsar, without AMQP: what Pulsar and its
clients do on this machine, beside what the gateway and RabbitMQ do (bench_perftest.py).

Each load does the work the gateway does for PerfTest ``-x1 -y1``: one producer publishing
``--size``-byte persistent messages, one entry per message (batching off, as the gateway's
producers on a broker without batch-index acknowledgements), at most ``--confirm``
unconfirmed, and at the same time one consumer of a Shared subscription (as the gateway's)
with a receiver queue of ``--qos``, acknowledging every message:

* ``pulsar-perf``: Apache Pulsar's own load generator, Java (pulsar-testclient, pinned in
  bench/pulsar-perf/pom.xml), its producer and its consumer in two JVMs.
* ``python``: pulsar-client's Python binding alone, used as the gateway uses it (the native
  ``_pulsar`` module, callbacks that keep their thread state, a message listener reading each
  message's payload and properties): this file run with ``--load python`` in a process of its
  own. No AMQP work at all, so its CPU per message is the least any gateway written on this
  binding spends.
* ``c-api``: the same with the binding's client, producer and consumer, but every
  per-message call through pulsar-client's C API on the binding's own C++ objects
  (bench/native/pulsar_c_api.c, compiled here with gcc into the cache): C callbacks queue send
  receipts and messages and wake Python once per batch, so there is no GIL hand-off per
  message. What a compiled module under the gateway's producers and consumers could save.

Each load runs ``--warmup`` seconds unmeasured, then ``--time`` seconds measured; the rates
are the broker's own counters over that window (the topic's messages in, the subscription's
messages out), so no client's own reporting is trusted; CPU seconds per process from /proc.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import select
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import bench_gateway_vs_pulsar as gvp  # noqa: E402
import maven  # noqa: E402

POM = BENCH_DIR / "pulsar-perf" / "pom.xml"
PERF_MAIN = "org.apache.pulsar.testclient.PulsarPerfTestTool"
SUBSCRIPTION = "direct"
START_TIMEOUT = 120.0  # a JVM's start and the first messages through
STOP_TIMEOUT = 30.0
KINDS = ("pulsar-perf", "python", "c-api")
C_API_SOURCE = BENCH_DIR / "native" / "pulsar_c_api.c"


@dataclass
class DirectResult:
    label: str
    sent: float | None = None
    received: float | None = None
    cpu: gvp.CpuMeter | None = None
    error: str = ""


def pulsar_perf_classpath() -> str:
    return maven.classpath(POM, "pulsar-perf")


def counters(admin: httpx.Client, topic: str) -> tuple[int, int]:
    """(messages published to ``topic``, messages delivered to its subscription) so far."""
    path = topic.removeprefix("persistent://")
    stats = admin.get(f"/admin/v2/persistent/{path}/stats")
    stats.raise_for_status()
    body = stats.json()
    subscription = body.get("subscriptions", {}).get(SUBSCRIPTION, {})
    return int(body.get("msgInCounter", 0)), int(subscription.get("msgOutCounter", 0))


def wait_flowing(
    admin: httpx.Client, topic: str, procs: dict[str, subprocess.Popen[bytes]]
) -> None:
    """Until messages go both in and out of ``topic`` (the clients are up), or fail."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} before its load ran")
        with contextlib.suppress(httpx.HTTPError):
            sent, received = counters(admin, topic)
            if sent and received:
                return
        time.sleep(0.2)
    raise RuntimeError(f"no messages through {topic} within {START_TIMEOUT:.0f} s")


@contextlib.contextmanager
def running(
    commands: dict[str, list[str]], log_dir: Path
) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Start ``commands`` in order (name -> argv); terminated on exit. Output in log_dir."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, command in commands.items():
            log = (log_dir / f"direct-{name}.log").open("wb")
            procs[name] = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
            log.close()
        yield procs
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT)


def pulsar_perf_commands(
    classpath: str, broker: gvp.Broker, topic: str, args: argparse.Namespace, log_dir: Path
) -> dict[str, list[str]]:
    conf = log_dir / "pulsar-perf-client.conf"  # pulsar-perf wants a client config file
    conf.touch()
    java = ["java", "-Xmx512m", "-cp", classpath, PERF_MAIN, str(conf)]
    bound = str(args.warmup + args.time + 60)  # stops on its own if this process dies
    return {
        "consumer": [
            *java,
            "consume",
            "-u",
            broker.broker_url,
            "-st",
            "Shared",
            "-ss",
            SUBSCRIPTION,
            "-q",
            str(args.qos),
            "-time",
            bound,
            topic,
        ],
        "producer": [
            *java,
            "produce",
            "-u",
            broker.broker_url,
            "-au",
            broker.web_url,
            "--disable-batching",
            "-s",
            str(args.size),
            "-o",
            str(args.confirm),
            "-r",
            "10000000",  # as fast as confirms allow, as PerfTest's producer
            "-time",
            bound,
            topic,
        ],
    }


def python_commands(
    kind: str, broker: gvp.Broker, topic: str, args: argparse.Namespace
) -> dict[str, list[str]]:
    """This file as the process of the ``python`` or ``c-api`` load."""
    load = [sys.executable, str(Path(__file__).resolve()), "--load", kind]
    options = ["--size", str(args.size), "--confirm", str(args.confirm), "--qos", str(args.qos)]
    if kind == "c-api":
        options += ["--module-dir", str(build_c_api())]
    return {kind: [*load, broker.broker_url, topic, *options]}


def build_c_api() -> Path:
    """The directory of the compiled pulsar_c_api module, built against the libpulsar that
    pulsar-client bundles, once per source (cached beside the benchmarks' Maven classpaths)."""
    sys.path.insert(0, str(REPO_DIR))
    from gateway.pulsar.compiled import compile_extension
    from gateway.pulsar.native_objects import libpulsar_paths

    libs = libpulsar_paths()
    key = hashlib.sha256(C_API_SOURCE.read_bytes() + str(libs[:1]).encode()).hexdigest()[:16]
    out_dir = maven.CACHE_DIR / f"pulsar-c-api-{key}"
    module = out_dir / f"pulsar_c_api{sysconfig.get_config_var('EXT_SUFFIX')}"
    if not module.exists():
        compile_extension([C_API_SOURCE], module)
    return out_dir


def run_direct(
    kind: str, broker: gvp.Broker, namespace: str, args: argparse.Namespace, log_dir: Path
) -> DirectResult:
    """One ``kind`` of load (KINDS) on a topic of ``namespace``: warm-up, then measured."""
    result = DirectResult(kind)
    topic = f"persistent://public/{namespace}/direct-{kind}"
    print(f"  {kind}: {args.warmup} s warm-up, {args.time} s measured on {topic}", flush=True)
    with httpx.Client(base_url=broker.web_url, timeout=30) as admin:
        try:
            if kind == "pulsar-perf":
                classpath = pulsar_perf_classpath()
                commands = pulsar_perf_commands(classpath, broker, topic, args, log_dir)
            else:
                commands = python_commands(kind, broker, topic, args)
            with running(commands, log_dir) as procs:
                wait_flowing(admin, topic, procs)
                time.sleep(args.warmup)  # unmeasured: the JVMs compile, the queues fill
                pids = {name: proc.pid for name, proc in procs.items()}
                if broker.pid:
                    pids["pulsar"] = broker.pid
                sent0, received0 = counters(admin, topic)
                with gvp.CpuMeter(pids) as meter:
                    time.sleep(args.time)
                sent1, received1 = counters(admin, topic)
        except (RuntimeError, httpx.HTTPError, maven.MavenError) as exc:
            result.error = str(exc)
            return result
    result.cpu = meter
    result.sent = (sent1 - sent0) / meter.wall
    result.received = (received1 - received0) / meter.wall
    return result


# --- the Python load (a process of its own) -------------------------------------------------------


# What the gateway puts in every message it publishes (gateway/backend/pulsar/messages.py).
PROPERTIES = {"amqp-exchange": "", "amqp-routing-key": "direct"}


def _binding_client(broker_url: str) -> Any:
    import pulsar

    return pulsar.Client(broker_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def _configurations(confirm: int, qos: int) -> tuple[Any, Any]:
    """The binding's consumer and producer configurations of both Python loads: a Shared
    subscription with a receiver queue of ``qos``; one entry per message, ``confirm`` pending."""
    import _pulsar

    consumer_conf = _pulsar.ConsumerConfiguration()
    consumer_conf.consumer_type(_pulsar.ConsumerType.Shared)
    consumer_conf.receiver_queue_size(qos)
    producer_conf = _pulsar.ProducerConfiguration()
    producer_conf.batching_enabled(False)
    producer_conf.max_pending_messages(confirm)
    return consumer_conf, producer_conf


def python_load(broker_url: str, topic: str, size: int, confirm: int, qos: int) -> None:
    """Publish and consume on ``topic`` until terminated, as described in the module docstring."""
    import _pulsar

    sys.path.insert(0, str(REPO_DIR))
    from gateway.pulsar.bridge import keep_thread_state

    client = _binding_client(broker_url)
    native = client._client

    def on_message(consumer: Any, message: Any) -> None:
        keep_thread_state()
        message.properties()
        message.data()
        consumer.acknowledge_async(message, _ignore)

    consumer_conf, producer_conf = _configurations(confirm, qos)
    consumer_conf.message_listener(on_message)
    consumer = native.subscribe(topic, SUBSCRIPTION, consumer_conf)
    producer = native.create_producer(topic, producer_conf)
    unconfirmed = threading.Semaphore(confirm)

    def confirmed(result: Any, _message_id: Any) -> None:
        keep_thread_state()
        unconfirmed.release()

    payload = b"x" * size
    # terminate() (SIGTERM) ends the loop through SystemExit, so the clients close.
    signal.signal(signal.SIGTERM, lambda _signal, _frame: sys.exit(0))
    try:
        while True:
            unconfirmed.acquire()
            builder = _pulsar.MessageBuilder()
            builder.content(payload)
            builder.properties(PROPERTIES)
            producer.send_async(builder.build(), confirmed)
    finally:
        producer.close()
        consumer.close()
        client.close()


def _ignore(_result: Any) -> None:
    pass


def c_api_load(
    module_dir: Path, broker_url: str, topic: str, size: int, confirm: int, qos: int
) -> None:
    """The same load with the binding's client, producer and consumer, but every per-message
    call through the C API (bench/native/pulsar_c_api.c): Python sends, waits on the eventfd,
    and handles whatever the C callbacks queued meanwhile in one drain."""
    sys.path.insert(0, str(REPO_DIR))
    from gateway.pulsar.native_objects import cpp_address

    sys.path.insert(0, str(module_dir))
    import pulsar_c_api  # type: ignore[import-not-found]

    client = _binding_client(broker_url)
    native = client._client
    wake_fd = pulsar_c_api.wake_fd()
    consumer_conf, producer_conf = _configurations(confirm, qos)
    if pulsar_c_api.listen(cpp_address(consumer_conf)) != qos:
        raise RuntimeError("the binding's objects are not laid out as pulsar_c_api.c expects")
    consumer = native.subscribe(topic, SUBSCRIPTION, consumer_conf)
    producer = native.create_producer(topic, producer_conf)
    producer_at, consumer_at = cpp_address(producer), cpp_address(consumer)
    payload = b"x" * size
    unconfirmed = token = 0
    while True:  # until terminated
        while unconfirmed < confirm:
            token += 1
            pulsar_c_api.send(producer_at, payload, PROPERTIES, token)
            unconfirmed += 1
        select.select([wake_fd], [], [])
        confirmed, received = pulsar_c_api.drain()
        unconfirmed -= len(confirmed)
        for _payload, _properties, handle in received:
            pulsar_c_api.ack(consumer_at, handle)


def main() -> int:
    parser = argparse.ArgumentParser(description="a load of bench/pulsar_direct.py, in its process")
    parser.add_argument("--load", choices=("python", "c-api"), required=True)
    parser.add_argument("broker_url")
    parser.add_argument("topic")
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--confirm", type=int, default=500)
    parser.add_argument("--qos", type=int, default=500)
    parser.add_argument("--module-dir", type=Path, help="where the c-api load's module is")
    args = parser.parse_args()
    if args.load == "python":
        python_load(args.broker_url, args.topic, args.size, args.confirm, args.qos)
    else:
        if args.module_dir is None:
            parser.error("--load c-api needs --module-dir")
        c_api_load(args.module_dir, args.broker_url, args.topic, args.size, args.confirm, args.qos)
    return 0


if __name__ == "__main__":
    sys.exit(main())
