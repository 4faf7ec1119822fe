"""RabbitMQ PerfTest against the gateway and against RabbitMQ itself, in one run.

    .venv/bin/python bench/bench_perftest.py                 # needs the local stack up
    .venv/bin/python bench/bench_perftest.py --time 15 --latency-time 10   # quicker

PerfTest (``com.rabbitmq:perf-test``, pinned in bench/perftest/pom.xml) is resolved with Maven
into ~/.m2 and run with ``java``. The same two loads go to each target:

* **throughput**: one producer and one consumer at once, ``--time`` seconds (default 30),
  ``-s 1000 -f persistent`` to a durable named queue, ``--confirm 500 --qos 500
  --multi-ack-every 100``: sending (confirmed) and receiving rates, consumer and confirm latency.
* **latency**: the same at a fixed ``--rate`` (default 200 msg/s) for ``--latency-time`` seconds:
  consumer latency when nothing queues up.

Targets: the gateway (``starlight-rabbitmq`` subprocess, vhost ``/`` on a fresh Pulsar
namespace deleted afterwards with its ZooKeeper metadata), and a private RabbitMQ node from
Debian's rabbitmq-server (bench/rabbitmq.py). If RabbitMQ cannot be started, the reason is printed
and the gateway is measured alone. CPU seconds of the gateway, the Pulsar JVM, RabbitMQ, the
PerfTest JVM and everything else are printed per run, and per message received. Each target
first gets ``--warmup`` seconds (default 10) of the throughput load, unmeasured, on a queue of
its own. ``--direct pulsar-perf`` / ``python`` / ``c-api`` add the throughput load put
straight onto Pulsar without AMQP (bench/pulsar_direct.py), for what Pulsar, pulsar-client's
Python binding and its C API do on the same machine. ``--broker-config KEY=VALUE`` runs the
gateway on a standalone of the run's own with that broker (or bookie) setting instead of the
local stack (bench_gateway_vs_pulsar.py's docstring).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import bench_gateway_vs_pulsar as gvp  # noqa: E402
import maven  # noqa: E402
import pulsar_direct  # noqa: E402
import rabbitmq  # noqa: E402
import starlight_java  # noqa: E402

POM = BENCH_DIR / "perftest" / "pom.xml"
BEHIND = 0.9  # a direct load's consumer under this share of its producer's rate fell behind
MAIN_CLASS = "com.rabbitmq.perf.PerfTest"


def perftest_classpath() -> str:
    """PerfTest's classpath from Maven (downloads into ~/.m2 the first time), cached per pom."""
    return maven.classpath(POM, "perftest")


def perftest_version() -> str:
    match = re.search(r"<perftest.version>([^<]+)<", POM.read_text())
    return match.group(1) if match else "?"


# --- one PerfTest run -----------------------------------------------------------------------------


@dataclass
class PerfResult:
    label: str
    sent: float | None = None
    received: float | None = None
    consumer_latency_us: list[int] = field(default_factory=list)  # min/median/75th/95th/99th
    confirm_latency_us: list[int] = field(default_factory=list)
    cpu: gvp.CpuMeter | None = None
    error: str = ""

    def latency(self, which: str) -> str:
        values = self.consumer_latency_us if which == "consumer" else self.confirm_latency_us
        if len(values) != 5:
            return "-"
        return f"{values[1] / 1000:.1f} / {values[3] / 1000:.1f} / {values[4] / 1000:.1f}"


_RATE = re.compile(r"(sending|receiving) rate avg: ([\d.]+) msg/s")
_LATENCY = re.compile(r"(consumer|confirm) latency min/median/75th/95th/99th ([\d/]+) ")


def parse_summary(output: str, result: PerfResult) -> None:
    for kind, value in _RATE.findall(output):
        if kind == "sending":
            result.sent = float(value)
        else:
            result.received = float(value)
    for kind, values in _LATENCY.findall(output):
        numbers = [int(v) for v in values.split("/")]
        if kind == "consumer":
            result.consumer_latency_us = numbers
        else:
            result.confirm_latency_us = numbers


def run_perftest(
    classpath: str,
    url: str,
    flags: list[str],
    label: str,
    pids: dict[str, int],
    seconds: float,
    log_dir: Path,
) -> PerfResult:
    """Run PerfTest with ``flags`` against ``url``; bounded by ``seconds`` plus a margin."""
    result = PerfResult(label)
    command = ["java", "-Xmx512m", "-cp", classpath, MAIN_CLASS, "--uri", url, *flags]
    log = log_dir / f"perftest-{re.sub(r'[^a-z0-9]+', '-', label.lower())}.log"
    print(f"  {label}: PerfTest {' '.join(flags)}", flush=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )
        with gvp.CpuMeter(pids, children="perftest") as meter:
            try:
                proc.wait(seconds + 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                result.error = f"PerfTest did not finish within {seconds + 60:.0f} s"
    result.cpu = meter
    output = log.read_text(errors="replace")
    parse_summary(output, result)
    if proc.returncode != 0 and not result.error:
        tail = "\n".join(output.splitlines()[-8:])
        result.error = f"PerfTest exited with {proc.returncode}: {tail}"
    elif result.sent is None and not result.error:
        result.error = "no summary in PerfTest's output: " + "\n".join(output.splitlines()[-8:])
    return result


def common_flags(args: argparse.Namespace) -> list[str]:
    flags = ["-x", "1", "-y", "1", "-s", str(args.size), "-f", "persistent", "-ad", "false"]
    return [*flags, "-c", str(args.confirm), "-q", str(args.qos), "-A", str(args.multi_ack)]


def throughput_flags(args: argparse.Namespace, queue: str, seconds: int) -> list[str]:
    """The throughput load, on ``queue`` for ``seconds``."""
    return [*common_flags(args), "-u", queue, "-z", str(seconds), "-i", "5"]


def warm_up(
    args: argparse.Namespace, classpath: str, url: str, tag: str, log_dir: Path
) -> str | None:
    """An unmeasured throughput run of ``--warmup`` seconds on a queue of its own: the first
    seconds of a JVM that has just started (the local stack's Pulsar after ``stack.py up``,
    PerfTest's own) are spent compiling, which made a first run's rate a third lower here.
    Returns what went wrong, if anything."""
    if not args.warmup:
        return None
    flags = throughput_flags(args, f"perf-warm-{tag}", args.warmup)
    result = run_perftest(classpath, url, flags, "warm-up", {}, float(args.warmup), log_dir)
    return result.error


def loads(args: argparse.Namespace, tag: str) -> list[tuple[str, list[str], float]]:
    common = common_flags(args)
    runs = [
        (
            "throughput",
            throughput_flags(args, f"perf-{tag}", args.time),
            float(args.time),
        )
    ]
    if args.latency_time:
        runs.append(
            (
                f"latency at {args.rate} msg/s",
                [
                    *common,
                    "-u",
                    f"perf-lat-{tag}",
                    "-r",
                    str(args.rate),
                    "-z",
                    str(args.latency_time),
                    "-i",
                    "5",
                ],
                float(args.latency_time),
            )
        )
    return runs


@contextlib.contextmanager
def gateway_target(
    stack: ModuleType,
    switch_interval: float | None,
    *,
    batch_index_acks: bool = False,
    broker_config: Sequence[str] = (),
    workers: int = 1,
    extra_conf: Sequence[str] = (),
) -> Iterator[tuple[str, dict[str, int]]]:
    """The gateway on the local stack, or with ``batch_index_acks`` on a standalone of the
    run's own whose broker keeps batch-index acknowledgements (the gateway batches there);
    ``workers`` > 1 starts it with ``--workers`` (the kernel spreads connections over them)."""
    with (
        gvp.measured_broker(
            stack, batch_index_acks=batch_index_acks, broker_config=broker_config
        ) as broker,
        gvp.fresh_namespace(broker.web_url, broker.zookeeper) as namespace,
        gvp.gateway_process(
            broker.broker_url,
            broker.web_url,
            broker.zookeeper,
            namespace,
            switch_interval=switch_interval,
            extra_args=("--workers", str(workers)) if workers > 1 else (),
            extra_conf=extra_conf,
        ) as gw,
    ):
        pids = gvp.gateway_pids(gw.pid)  # with --workers, the workers too
        if broker.pid:
            pids["pulsar"] = broker.pid
        print(
            f"gateway on 127.0.0.1:{gw.port}, namespace public/{namespace}, memory allocator: "
            f"{gvp.allocator_of(gw.pid)}",
            flush=True,
        )
        yield f"amqp://guest:guest@127.0.0.1:{gw.port}", pids
        gvp.print_entries_per_message("gateway", broker.web_url, namespace)


@contextlib.contextmanager
def rabbitmq_target() -> Iterator[tuple[str, dict[str, int]]]:
    with rabbitmq.local_rabbitmq() as node:
        print(f"RabbitMQ {rabbitmq.version()} on 127.0.0.1:{node.port}", flush=True)
        yield node.amqp_url, {"rabbitmq": node.pid}


def run_direct_loads(
    stack: ModuleType, args: argparse.Namespace, log_dir: Path
) -> dict[str, dict[str, PerfResult]]:
    """The throughput load without AMQP, per ``--direct`` kind (bench/pulsar_direct.py), in a
    namespace of its own on the local stack; results under "pulsar <kind>"."""
    results: dict[str, dict[str, PerfResult]] = {}
    with (
        gvp.measured_broker(stack, batch_index_acks=False) as broker,
        gvp.fresh_namespace(broker.web_url, broker.zookeeper) as namespace,
    ):
        for kind in args.direct:
            direct = pulsar_direct.run_direct(kind, broker, namespace, args, log_dir)
            result = PerfResult(
                direct.label,
                sent=direct.sent,
                received=direct.received,
                cpu=direct.cpu,
                error=direct.error,
            )
            results[f"pulsar {kind}"] = {"throughput": result}
    return results


def cpu_per_message(result: PerfResult) -> str:
    """Each measured process's CPU per message received, e.g. "gateway 85, pulsar 60"."""
    cpu = result.cpu
    if cpu is None or not result.received or not cpu.wall:
        return ""
    messages = result.received * cpu.wall
    used = {name: seconds for name, seconds in cpu.used.items() if name != "machine"}
    return ", ".join(f"{name} {1e6 * seconds / messages:.0f}" for name, seconds in used.items())


def fmt(value: float | None) -> str:
    return f"{value:,.0f}" if value else "-"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def print_report(results: dict[str, dict[str, PerfResult]], notes: list[str]) -> None:
    gw, rmq = results.get("gateway", {}), results.get("rabbitmq", {})
    print()
    print("| load | metric | gateway | RabbitMQ | gateway/RabbitMQ |")
    print("|---|---|---|---|---|")
    for load in dict.fromkeys([*gw, *rmq]):
        g, r = gw.get(load), rmq.get(load)
        rows: list[tuple[str, Callable[[PerfResult], float | None]]] = [
            ("sent msg/s (confirmed)", lambda x: x.sent),
            ("received msg/s", lambda x: x.received),
        ]
        for metric, get in rows:
            gv = get(g) if g else None
            rv = get(r) if r else None
            print(f"| {load} | {metric} | {fmt(gv)} | {fmt(rv)} | {ratio(gv, rv)} |")
        for which in ("consumer", "confirm"):
            print(
                f"| {load} | {which} latency median/95th/99th ms | "
                f"{g.latency(which) if g else '-'} | {r.latency(which) if r else '-'} | |"
            )
    direct = {name: runs for name, runs in results.items() if name.startswith("pulsar ")}
    if direct:
        print()
        print("The throughput load straight onto Pulsar, without AMQP (bench/pulsar_direct.py):")
        print("| client | sent msg/s | received msg/s | received / RabbitMQ's | gateway's / its |")
        print("|---|---|---|---|---|")
        r_received = rmq["throughput"].received if "throughput" in rmq else None
        g_received = gw["throughput"].received if "throughput" in gw else None
        for name, runs in direct.items():
            d = runs["throughput"]
            print(
                f"| {name} | {fmt(d.sent)} | {fmt(d.received)} | "
                f"{ratio(d.received, r_received)} | {ratio(g_received, d.received)} |"
            )
            if d.sent and d.received and d.received < BEHIND * d.sent:
                notes.append(
                    f"{name}: the consumer fell behind its producer (nothing holds a Pulsar "
                    "producer back for its consumer): its received rate is a backlog's"
                )
    print()
    for target, runs in results.items():
        for load, res in runs.items():
            if res.cpu is not None:
                print(f"{target:>9} {load:<24} {res.cpu.summary()}")
                per_message = cpu_per_message(res)
                if per_message:
                    print(f"{'':>9} {'':<24} CPU µs per message received: {per_message}")
            if res.error:
                print(f"{target:>9} {load:<24} FAILED: {res.error}")
    for note in notes:
        print(f"note: {note}")


def print_versus_starlight_java(results: dict[str, dict[str, PerfResult]]) -> None:
    """The gateway beside Starlight for RabbitMQ's Java implementation (--starlight-java)."""
    gw, java = results.get("gateway", {}), results.get("starlight-java", {})
    print()
    print("| load | metric | gateway | Starlight-Java | gateway/Starlight-Java |")
    print("|---|---|---|---|---|")
    for load in dict.fromkeys([*gw, *java]):
        g, j = gw.get(load), java.get(load)
        for metric, gv, jv in (
            ("sent msg/s (confirmed)", g.sent if g else None, j.sent if j else None),
            ("received msg/s", g.received if g else None, j.received if j else None),
        ):
            print(f"| {load} | {metric} | {fmt(gv)} | {fmt(jv)} | {ratio(gv, jv)} |")
        print(
            f"| {load} | consumer latency median/95th/99th ms | "
            f"{g.latency('consumer') if g else '-'} | {j.latency('consumer') if j else '-'} | |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time", type=int, default=30, help="seconds of the throughput run")
    parser.add_argument("--latency-time", type=int, default=15, help="0 skips the latency run")
    parser.add_argument("--rate", type=int, default=200, help="msg/s of the latency run")
    parser.add_argument(
        "--warmup",
        type=int,
        default=10,
        help="seconds of unmeasured throughput load on each target first (0: none)",
    )
    parser.add_argument("--size", type=int, default=1000, help="message bytes (-s)")
    parser.add_argument("--confirm", type=int, default=500, help="unconfirmed publishes (-c)")
    parser.add_argument("--qos", type=int, default=500, help="consumer prefetch (-q)")
    parser.add_argument("--multi-ack", type=int, default=100, help="multi-ack every (-A)")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS for the machine's load to drop below 0.3 cores before starting",
    )
    gvp.add_gateway_switches(parser)
    gvp.add_broker_config_switch(parser)
    parser.add_argument(
        "--switch-interval",
        type=float,
        metavar="SECONDS",
        help="run the gateway under sys.setswitchinterval(SECONDS) (default: Python's 0.005)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="record the gateway with py-spy during each PerfTest run "
        "(DIR/gateway-perftest-<load>.txt) and print the top functions",
    )
    parser.add_argument(
        "--batch-index-acks",
        action="store_true",
        help="run the gateway on a Pulsar standalone of the run's own whose broker keeps "
        "batch-index acknowledgements (acknowledgmentAtBatchIndexLevelEnabled=true): the "
        "gateway's producers batch only there",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="start the gateway with --workers N (SO_REUSEPORT: which worker takes PerfTest's "
        "producer and consumer connection is the kernel's choice)",
    )
    parser.add_argument(
        "--direct",
        action="append",
        choices=pulsar_direct.KINDS,
        default=[],
        help="also put the throughput load straight onto the local stack's Pulsar, without "
        "AMQP (bench/pulsar_direct.py): Pulsar's own pulsar-perf (Java), pulsar-client's "
        "Python binding alone, or its C API from Python (c-api); repeat for several",
    )
    parser.add_argument(
        "--starlight-java",
        action="store_true",
        help="also run Starlight for RabbitMQ's Java implementation "
        f"{starlight_java.TAG}, built from source (bench/starlight_java.py)",
    )
    parser.add_argument("--no-gateway", action="store_true")
    parser.add_argument("--no-rabbitmq", action="store_true")
    parser.add_argument(
        "--logs", type=Path, metavar="DIR", help="keep PerfTest's output here (default: removed)"
    )
    args = parser.parse_args(argv)

    spy = gvp.py_spy_exe() if args.profile is not None else None
    if args.profile is not None:
        if spy is None:
            parser.error("--profile needs py-spy on PATH or in .venv/bin (pip install py-spy)")
        args.profile.mkdir(parents=True, exist_ok=True)
    stack = gvp.load_stack()
    print(f"machine: {gvp.machine_line()}")
    gvp.wait_for_quiet(args.wait_quiet)
    classpath = perftest_classpath()
    print(f"RabbitMQ PerfTest {perftest_version()} ({shutil.which('java')})")
    notes: list[str] = []
    results: dict[str, dict[str, PerfResult]] = {}
    tag = f"{int(time.time())}"
    log_dir = args.logs or Path(tempfile.mkdtemp(prefix="bench-perftest-"))
    log_dir.mkdir(parents=True, exist_ok=True)

    targets: list[tuple[str, contextlib.AbstractContextManager[tuple[str, dict[str, int]]]]] = []
    if not args.no_gateway:
        if stack.is_up() or args.batch_index_acks or args.broker_config:
            targets.append(
                (
                    "gateway",
                    gateway_target(
                        stack,
                        args.switch_interval,
                        batch_index_acks=args.batch_index_acks,
                        broker_config=args.broker_config,
                        workers=args.workers,
                        extra_conf=gvp.gateway_conf(args),
                    ),
                )
            )
        else:
            notes.append("gateway skipped: the local stack is not up (scripts/stack.py up)")
    if args.direct and not stack.is_up():
        notes.append("--direct skipped: the local stack is not up (scripts/stack.py up)")
        args.direct = []
    if not args.no_rabbitmq:
        reason = rabbitmq.unavailable_reason()
        if reason:
            notes.append(f"RabbitMQ skipped: {reason}")
        else:
            targets.append(("rabbitmq", rabbitmq_target()))
    if args.starlight_java:
        if stack.is_up():
            targets.append(("starlight-java", starlight_java.starlight_java_target(stack)))
        else:
            notes.append("Starlight-Java skipped: the local stack is not up (scripts/stack.py up)")
    try:
        for name, target in targets:
            try:
                with target as (url, pids):
                    failed = warm_up(args, classpath, url, tag, log_dir)
                    if failed:
                        notes.append(f"{name} warm-up failed: {failed}")
                    runs: dict[str, PerfResult] = {}
                    for load, flags, seconds in loads(args, tag):
                        profiling = spy is not None and name == "gateway"
                        out = (args.profile or log_dir) / f"gateway-perftest-{load.split()[0]}.txt"
                        with (
                            gvp.py_spy(spy, pids["gateway"], out)
                            if profiling and spy is not None
                            else contextlib.nullcontext()
                        ):
                            runs[load] = run_perftest(
                                classpath, url, flags, load, pids, seconds, log_dir
                            )
                        if profiling and out.exists():
                            notes.append(
                                f"gateway profile, PerfTest {load}:\n{gvp.profile_summary(out)}"
                            )
                    results[name] = runs
            except (rabbitmq.RabbitMQUnavailable, RuntimeError) as exc:
                notes.append(f"{name} failed: {exc}")
        if args.direct:  # last: the gateway's run keeps the conditions of the earlier ones
            results.update(run_direct_loads(stack, args, log_dir))
    finally:
        if args.logs is None:
            shutil.rmtree(log_dir, ignore_errors=True)
        else:
            notes.append(f"PerfTest output in {log_dir}")
    print_report(results, notes)
    if args.starlight_java:
        print_versus_starlight_java(results)
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
