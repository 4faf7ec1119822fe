"""bench_fleet's watch lag under write load (issue 18): a write on one process -> in another
process's view, in a large vhost, while other processes keep writing to it.

Three kinds of process, all on the benchmark's private ZooKeeper, each with its own GIL:

* **the reader** (replica B): bench_metadata's ``--reader``, a ``ZooKeeperMetadataStore`` that
  opens the vhost (loading all of it: its time to ``ready`` is printed too) and reports when
  each probe queue is in its view;
* **the writers** (``--writers``, default 2): this file run as ``--writer``, each a store that
  declares durable queues (``create_queue``: one transaction of one znode, one watch event
  and one read for every other replica) at ``rate / writers`` per second, with a few tasks in
  flight, paced on a schedule (a writer that falls behind catches up, at most one second's
  worth), until its stdin closes; it prints the operations it did and their latency;
* **the probe** (replica A, this process): ``--probes`` queue declares, one at a time, each
  after B has seen the previous one and a pause of 5-15 ms (so that probes fall at random
  points of the writers' schedule); the figure is the time from the start of the write to B's
  view having it (bench_metadata.propagation's), on one monotonic clock.

The writers start once B is ready and run for ``--lag-warmup`` seconds before the first probe
(and then, from bench_fleet, until its ZooKeeper's JIT compiler is quiet: the server was
restarted on the vhost's data just before, and compiles its write path under this load); they
are stopped after the last. Their queues stay in the vhost (its deletion removes them).
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
sys.path[:0] = [str(REPO_DIR), str(BENCH_DIR)]

import bench_metadata as bm  # noqa: E402

from gateway.metadata.zookeeper import ZooKeeperMetadataStore  # noqa: E402
from gateway.model.entities import Queue  # noqa: E402

# Writer tasks in flight per writer process: enough to hide the round trip at 500 ops/s.
WRITER_TASKS = 16


@dataclass
class LagResult:
    reader_ready: float  # spawn -> "ready" (the reader loaded the vhost)
    write: list[float]  # the probes' write latencies
    seen: list[float]  # write start -> in B's view
    writer_ops: int  # every writer's operations while the probes ran (and the warm-up)
    writer_seconds: float  # the longest writer's run
    writer_latency: list[float]  # the writers' operation latencies (p50 / p99)
    reader_rss_mib: float
    reader_cpu: float  # CPU seconds of the reader, ready -> the last probe seen

    @property
    def writer_rate(self) -> float:
        return self.writer_ops / self.writer_seconds if self.writer_seconds else 0.0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


async def measure(
    hosts: str,
    prefix: str,
    namespace: str,
    *,
    rate: float,
    writers: int,
    probes: int,
    warmup: float,
    tag: str,
    settled: Callable[[], bool] | None = None,
    settle_limit: float = 60.0,
    settle_every: float = 2.0,
) -> LagResult:
    """``settled``, if given, is asked every ``settle_every`` seconds after the ``warmup``
    (for at most ``settle_limit`` seconds) until it says the server is settled: bench_fleet's
    ZooKeeper restarted just before, and its JIT compiles the write path under this load."""
    reader_command = [
        sys.executable,
        bm.__file__,
        "--reader",
        hosts,
        prefix,
        namespace,
        tag,
        str(probes),
    ]
    spawned = time.perf_counter()
    reader = await trio.lowlevel.open_process(reader_command, stdout=subprocess.PIPE)
    writer_processes: list[trio.Process] = []
    assert reader.stdout is not None
    lines = bm._Lines(reader.stdout)
    write_times: list[float] = []
    seen_times: list[float] = []
    try:
        with trio.fail_after(900):
            assert await lines.next() == "ready"
            reader_ready = time.perf_counter() - spawned
            print(f"  lag: reader loaded the vhost in {reader_ready:.1f} s", flush=True)
            for index in range(writers):
                command = [
                    sys.executable,
                    __file__,
                    "--writer",
                    hosts,
                    prefix,
                    namespace,
                    f"{tag}-w{index}",
                    str(rate / writers),
                ]
                writer_processes.append(
                    await trio.lowlevel.open_process(
                        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE
                    )
                )
            outputs = [bm._Lines(p.stdout) for p in writer_processes if p.stdout is not None]
            for output in outputs:
                assert await output.next() == "started"
            await trio.sleep(warmup)  # the writers at their rate before the first probe
            settling = time.perf_counter()
            while settled is not None and time.perf_counter() - settling < settle_limit:
                await trio.sleep(settle_every)
                if settled():
                    break
            if settled is not None:
                print(
                    f"  lag: ZooKeeper settled after {warmup + time.perf_counter() - settling:.1f}"
                    " s of writes",
                    flush=True,
                )
            cpu_before = _cpu_seconds(reader.pid)
            async with ZooKeeperMetadataStore(hosts, prefix=prefix) as a:
                await bm.timed_probes(
                    a, namespace, tag, probes, lines, write_times, seen_times, (0.005, 0.015)
                )
            reader_cpu = _cpu_seconds(reader.pid) - cpu_before
            ops = 0
            seconds = 0.0
            latencies: list[float] = []
            for process, output in zip(writer_processes, outputs, strict=True):
                assert process.stdin is not None
                await process.stdin.aclose()  # the writer's signal to stop
                word, done, elapsed, *latency = (await output.next()).split()
                assert word == "done"
                ops += int(done)
                seconds = max(seconds, float(elapsed))
                latencies += [float(value) for value in latency]
            word, _rebuild = (await lines.next()).split()
            assert word == "rebuild"
            word, rss = (await lines.next()).split()
            assert word == "rss"
    except BaseException:
        for process in [reader, *writer_processes]:
            process.kill()
        raise
    finally:
        with trio.CancelScope(shield=True):
            for process in [reader, *writer_processes]:
                await process.wait()
    return LagResult(
        reader_ready,
        write_times,
        seen_times,
        ops,
        seconds,
        latencies,
        int(rss) / 1024,
        reader_cpu,
    )


async def writer(hosts: str, prefix: str, namespace: str, tag: str, rate: float) -> None:
    """Declare queues at ``rate`` per second until stdin closes; then print ``done <ops>
    <seconds> <latency samples...>`` (a sample of up to 2,000 latencies)."""
    latencies: list[float] = []
    done = 0
    async with ZooKeeperMetadataStore(hosts, prefix=prefix, request_timeout=60) as store:
        print("started", flush=True)
        started = time.perf_counter()
        next_index = 0

        async def work() -> None:
            nonlocal next_index, done
            while True:
                index = next_index
                next_index += 1
                due = started + index / rate
                now = time.perf_counter()
                if due > now:
                    await trio.sleep(due - now)
                elif now - due > 1.0:  # more than a second behind: give up that backlog
                    next_index = max(next_index, int((now - started) * rate))
                begun = time.perf_counter()
                await store.create_queue(namespace, Queue(f"w-{tag}-{index}", durable=True))
                latencies.append(time.perf_counter() - begun)
                done += 1

        async def until_stdin_closes(cancel: trio.CancelScope) -> None:
            stdin = trio.lowlevel.FdStream(sys.stdin.fileno())
            while await stdin.receive_some():
                pass
            cancel.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(until_stdin_closes, nursery.cancel_scope)
            for _ in range(WRITER_TASKS):
                nursery.start_soon(work)
        elapsed = time.perf_counter() - started
    sample = random.sample(latencies, min(2000, len(latencies)))
    print(f"done {done} {elapsed:.3f} " + " ".join(f"{value:.6f}" for value in sample), flush=True)


def summary(result: LagResult) -> str:
    if not result.writer_latency:
        return (
            f"the reader (a store in a process of its own) loaded the vhost in "
            f"{result.reader_ready:.1f} s from its start; no writers; probe writes p50 "
            f"{statistics.median(result.write) * 1000:.1f} ms; the reader used "
            f"{result.reader_cpu:.1f} CPU s while probed, RSS {result.reader_rss_mib:.0f} MiB"
        )
    return (
        f"the reader (a store in a process of its own) loaded the vhost in "
        f"{result.reader_ready:.1f} s from its start; writers {result.writer_rate:,.0f} ops/s "
        f"({result.writer_ops:,} in {result.writer_seconds:.1f} s, latency p50 / p99 "
        f"{bm.percentile(result.writer_latency, 0.5) * 1000:.1f} / "
        f"{bm.percentile(result.writer_latency, 0.99) * 1000:.1f} ms); probe writes p50 "
        f"{statistics.median(result.write) * 1000:.1f} ms; the reader used "
        f"{result.reader_cpu:.1f} CPU s while probed, RSS {result.reader_rss_mib:.0f} MiB"
    )


if __name__ == "__main__":
    if sys.argv[1:2] != ["--writer"]:
        sys.exit("usage: fleet_lag.py --writer HOSTS PREFIX NAMESPACE TAG RATE")
    hosts_, prefix_, namespace_, tag_, rate_ = sys.argv[2:7]
    trio.run(writer, hosts_, prefix_, namespace_, tag_, float(rate_))
