"""The rollup job, measured once: events/s it gets through in local mode, and the delay from a
usage event's publish to its row in PostgreSQL.

    .venv/bin/python bench/bench_rollup.py                 # ~5 min on 2 cores
    .venv/bin/python bench/bench_rollup.py --events 20000 --live-seconds 100

Needs the local stack up (``python3 scripts/stack.py up``) and Debian's postgresql; it starts a
private PostgreSQL on a free loopback port and the real ``starlight-rabbitmq rollup`` command
(``--master local[2]``, windows 60 s and 3600 s, watermark ``--watermark`` s, trigger 1 s) on a
fresh topic, and removes both afterwards.

1. **Throughput.** ``--events`` usage events (``--vhosts`` vhosts x 2 replicas, one event per
   replica and vhost every 10 s of event time, ending now) are on the topic before the job
   starts. Figure: events / seconds from the job's first batch starting to the last of them
   being processed by *both* window queries (they run side by side on the same cores), read
   from the job's progress lines. The first batch includes the Python workers' start.
2. **Delay.** Then a live fleet is simulated for ``--live-seconds``: every second, each of 3
   vhosts gets an event for the second just past (as a replica reporting every second would).
   For each minute window that closes in that time, the delay is from the publish of its last
   event to its row appearing in PostgreSQL (polled every 0.1 s). A window can only be written
   once the watermark passes its end, so the delay is about the watermark plus the reporting
   interval plus a trigger and a batch.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx
import psycopg
import pulsar

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gateway.server.usage_publisher import usage_schema  # noqa: E402
from tests.support.postgres import running_postgres  # noqa: E402
from tests.support.usage_events import EventProducer, event  # noqa: E402

BROKER = "pulsar://127.0.0.1:6650"
WEB = "http://127.0.0.1:8080"
PROGRESS = re.compile(
    r"^(\S+ \S+) INFO gateway.rollup: starlight-rollup-(\d+)s batch (\d+): (\d+) events in"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--vhosts", type=int, default=50)
    parser.add_argument("--live-seconds", type=int, default=150)
    parser.add_argument("--watermark", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()

    print(f"load average before: {os.getloadavg()}", flush=True)
    topic_name = f"bench-rollup-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{topic_name}"
    work = Path(tempfile.mkdtemp(prefix="bench-rollup-"))
    producer = EventProducer(BROKER, topic)
    job: subprocess.Popen[bytes] | None = None
    try:
        with running_postgres() as postgres:
            preload(producer, args.events, args.vhosts)
            config = work / "gateway.conf"
            config.write_text(
                f"brokerServiceURL={BROKER}\nbrokerWebServiceURL={WEB}\n"
                "configurationStoreServers=127.0.0.1:2181\n"
                f"rollupWatermarkSeconds={args.watermark}\nrollupTriggerSeconds=1\n"
                f"rollupCheckpointLocation={work / 'checkpoint'}\n"
                f"rollupParquetPath={work / 'parquet'}\nrollupPostgresUrl={postgres.url}\n"
            )
            log = work / "job.log"
            with open(log, "wb") as output:
                started = time.time()
                job = subprocess.Popen(
                    [
                        str(Path(sys.executable).parent / "starlight-rabbitmq"),
                        *("rollup", "-c", str(config), "--topic", topic),
                        *("--master", "local[2]", "--conf", "spark.ui.enabled=false"),
                    ],
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                throughput(log, args.events, started, args.timeout)
                delay(producer, postgres.url, args.live_seconds, args.timeout)
    finally:
        if job is not None:
            os.kill(job.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                job.wait(120)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
        producer.close()
        httpx.delete(
            f"{WEB}/admin/v2/persistent/public/default/{topic_name}",
            params={"force": "true"},
            timeout=30,
        )
        subprocess.run(["rm", "-rf", str(work)], check=False)
    print(f"load average after: {os.getloadavg()}", flush=True)
    return 0


def preload(producer: EventProducer, count: int, vhosts: int) -> None:
    """``count`` events, sent in batches (the way a busy fleet's producers would) and all
    confirmed by the broker before the job starts."""
    now_ms = int(time.time() * 1000) // 10_000 * 10_000
    per_step = vhosts * 2
    steps = -(-count // per_step)
    sender = producer.client.create_producer(
        producer.topic,
        schema=usage_schema(),
        batching_enabled=True,
        block_if_queue_full=True,
        max_pending_messages=10_000,
    )
    start = time.monotonic()
    failures: list[object] = []
    confirmed = threading.Semaphore(0)

    def done(result: object, _message_id: object) -> None:
        if result != pulsar.Result.Ok:
            failures.append(result)
        confirmed.release()

    number = 0
    for step in range(steps):
        at = now_ms - (steps - step) * 10_000
        for v in range(vhosts):
            for replica in ("r1", "r2"):
                if number == count:
                    break
                item = event(
                    number,
                    vhost=f"v{v}",
                    replica=replica,
                    start_ms=at,
                    published_messages=100,
                    published_bytes=10_000,
                    delivered_messages=90,
                    delivered_bytes=9_000,
                    peak_connections=4,
                )
                sender.send_async(item, done)
                number += 1
    sender.flush()
    for _ in range(number):
        confirmed.acquire()
    if failures:
        raise SystemExit(f"{len(failures)} events were not stored: {failures[0]}")
    print(
        f"preloaded {count} events ({vhosts} vhosts x 2 replicas, {steps} steps of 10 s, "
        f"batched) in {time.monotonic() - start:.1f} s",
        flush=True,
    )


def throughput(log: Path, count: int, started: float, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        done: dict[str, int] = {}
        first_start: float | None = None
        last_end = 0.0
        for line in log.read_text(errors="replace").splitlines():
            match = PROGRESS.match(line)
            if not match:
                continue
            when = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            took = float(re.search(r"took (\d+) ms", line).group(1)) / 1000  # type: ignore[union-attr]
            done[match.group(2)] = done.get(match.group(2), 0) + int(match.group(4))
            begin = when - took
            first_start = begin if first_start is None else min(first_start, begin)
            if int(match.group(4)):
                last_end = max(last_end, when)
        if len(done) == 2 and all(total >= count for total in done.values()):
            assert first_start is not None
            seconds = last_end - first_start
            print(
                f"throughput: {count} events through both window queries in {seconds:.1f} s "
                f"from the first batch's start: {count / seconds:,.0f} events/s "
                f"(job start to first batch: {first_start - started:.1f} s)",
                flush=True,
            )
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out; processed {done}\n{log.read_text()[-3000:]}")
        time.sleep(1)


def delay(producer: EventProducer, url: str, seconds: int, timeout: float) -> None:
    last_publish: dict[int, float] = {}  # minute window start (ms) -> last publish (epoch s)
    stop = threading.Event()

    def fleet() -> None:
        number = 10_000_000
        while not stop.is_set():
            tick = time.time()
            start_ms = int(tick * 1000) // 1000 * 1000 - 1000
            for v in range(3):
                producer.send(
                    [
                        event(
                            number,
                            vhost=f"live{v}",
                            replica="live",
                            start_ms=start_ms,
                            length_ms=1000,
                            published_messages=1,
                        )
                    ]
                )
                number += 1
            last_publish[start_ms // 60_000 * 60_000] = time.time()
            stop.wait(max(0.0, 1 - (time.time() - tick)))

    thread = threading.Thread(target=fleet, daemon=True)
    thread.start()
    seen: dict[int, float] = {}
    end = time.time() + seconds
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            while time.time() < end:
                rows = connection.execute(
                    "SELECT DISTINCT window_start FROM vhost_throughput "
                    "WHERE window_seconds = 60 AND vhost LIKE 'live%'"
                ).fetchall()
                for (window_start,) in rows:
                    key = int(window_start.timestamp() * 1000)
                    seen.setdefault(key, time.time())
                time.sleep(0.1)
    finally:
        stop.set()
        thread.join(10)
    # A window's first minute may have started before the fleet did: only whole windows.
    first = min(last_publish) if last_publish else 0
    delays = [
        seen[window] - last_publish[window]
        for window in sorted(seen)
        if window in last_publish and window != first
    ]
    if not delays:
        print(f"delay: no whole minute window was written within {seconds} s", flush=True)
        return
    print(
        "publish -> row delay (last event of a minute window to its PostgreSQL row): "
        + ", ".join(f"{value:.1f} s" for value in delays)
        + f"; median {statistics.median(delays):.1f} s",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
