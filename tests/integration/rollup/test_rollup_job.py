"""The rollup job end to end: real Pulsar, real Spark (local mode), real PostgreSQL.

One scenario, three runs of the real command (`starlight-rabbitmq rollup`), because every
Spark start costs tens of seconds on a small machine:

1. Known events (two vhosts, two replicas, duplicate sends, two malformed payloads, a "clock"
   event that moves the watermark) are on the topic before the job starts. Run 1 SIGKILLs
   itself right after the first batch that wrote rows, before Spark commits that batch: the
   crash between write and commit.
2. Run 2 restarts from the checkpoint and replays that batch (the sinks must not change).
   Then a late event within the watermark (counted), one beyond it (dropped and logged) and a
   second clock event arrive, and run 2 is SIGKILLed, process group and all, once it has read
   them.
3. Run 3 resumes from the checkpoint and is stopped gracefully. Both sinks hold exactly the
   expected rows: every (vhost, window) once, with the sums of the distinct events, in
   PostgreSQL and in Parquet.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from gateway.observability.usage_event import UsageEvent
from gateway.rollup.rows import OUTPUT_COLUMNS, SUMMED_FIELDS
from tests.conftest import StackEndpoints
from tests.support.postgres import PostgresServer, running_postgres
from tests.support.usage_events import EventProducer, event

pytestmark = pytest.mark.integration

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
WINDOWS = (60, 3600)
WATERMARK_SECONDS = 60
COMMAND = str(Path(sys.executable).parent / "starlight-rabbitmq")


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with running_postgres() as server:
        yield server


@pytest.fixture
def topic(pulsar_stack: StackEndpoints) -> Iterator[str]:
    name = f"rollup-{uuid.uuid4().hex[:8]}"
    yield f"persistent://public/default/{name}"
    # The job's durable subscriptions go with the topic.
    httpx.delete(
        f"{pulsar_stack.web_url}/admin/v2/persistent/public/default/{name}",
        params={"force": "true"},
        timeout=30,
    )


class Job:
    """One run of the real command, in its own process group (the driver, the JVM, the
    Python workers), its output in a file."""

    def __init__(self, config: Path, topic: str, log: Path, env: dict[str, str]) -> None:
        self.log = log
        self._output = open(log, "ab")  # noqa: SIM115 - closed in stop()
        # Spark's block manager and staging directories and the JVM's unpacked native
        # libraries (lz4, snappy) go to the test's own directory, not /tmp: a killed JVM
        # (the crash runs) never removes them, and every `make test` would leave more.
        scratch = log.parent / "spark-tmp"
        scratch.mkdir(exist_ok=True)
        self.process = subprocess.Popen(
            [
                *(COMMAND, "rollup", "-c", str(config), "--topic", topic),
                *("--master", "local[2]", "--conf", "spark.ui.enabled=false"),
                *("--conf", f"spark.driver.extraJavaOptions=-Djava.io.tmpdir={scratch}"),
            ],
            stdout=self._output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TMPDIR": str(scratch), "SPARK_LOCAL_DIRS": str(scratch), **env},
            start_new_session=True,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_exit(self, timeout: float) -> int:
        code = self.process.wait(timeout)
        self._kill_group()
        return code

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM to the driver (a graceful stop), then whatever is left of the group is
        killed."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            self._kill_group()
            self._output.close()

    def kill(self) -> None:
        """SIGKILL to every process of the run."""
        self._kill_group()
        self.process.wait(60)
        self._output.close()

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


def wait_until(condition: Callable[[], bool], timeout: float, what: str, job: Job) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if job.process.poll() is not None:
            pytest.fail(
                f"the job exited ({job.process.returncode}) while waiting for {what}:\n"
                + job.text()[-5000:]
            )
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}:\n" + job.text()[-5000:])
        time.sleep(0.5)


# ------------------------------------------------------------------------------ expectations

Key = tuple[str, int, int]  # vhost, window seconds, window start (epoch ms)


def expected_rows(events: list[UsageEvent], watermark_ms: int) -> dict[Key, dict[str, int]]:
    """What the job must write: per (vhost, window), sums over distinct events; the peak is the
    sum over replicas of each one's peak; only windows the watermark has closed."""
    distinct = {item.event_id: item for item in events}
    per_replica: dict[tuple[Key, str], dict[str, int]] = {}
    for item in distinct.values():
        for seconds in WINDOWS:
            length = seconds * SECOND
            start = item.window_start_ms // length * length
            if start + length > watermark_ms:
                continue
            sums = per_replica.setdefault(((item.vhost, seconds, start), item.replica), {})
            for name in SUMMED_FIELDS:
                sums[name] = sums.get(name, 0) + getattr(item, name)
            sums["peak_connections"] = max(sums.get("peak_connections", 0), item.peak_connections)
            sums["events"] = sums.get("events", 0) + 1
    rows: dict[Key, dict[str, int]] = {}
    for (key, _replica), sums in per_replica.items():
        row = rows.setdefault(key, {"replicas": 0})
        row["replicas"] += 1
        for name, value in sums.items():
            row[name] = row.get(name, 0) + value
    return rows


VALUE_COLUMNS = (*SUMMED_FIELDS, "peak_connections", "events", "replicas")


def postgres_rows(url: str) -> dict[Key, dict[str, int]]:
    try:
        with psycopg.connect(url) as connection:
            records = connection.execute(
                f"SELECT {', '.join(OUTPUT_COLUMNS)} FROM vhost_throughput"
            ).fetchall()
    except psycopg.errors.UndefinedTable:
        return {}
    rows = {}
    for record in records:
        row = dict(zip(OUTPUT_COLUMNS, record, strict=True))
        key = (row["vhost"], row["window_seconds"], int(row["window_start"].timestamp() * 1000))
        rows[key] = {name: row[name] for name in VALUE_COLUMNS}
    return rows


def parquet_rows(path: Path) -> list[tuple[Key, dict[str, int]]]:
    import pyarrow.dataset as ds

    table = ds.dataset(str(path), format="parquet", partitioning="hive").to_table()
    found = []
    for row in table.to_pylist():
        start = row["window_start"]
        start_ms = int(start.timestamp() * 1000) if hasattr(start, "timestamp") else start
        key = (row["vhost"], int(row["window_seconds"]), start_ms)
        found.append((key, {name: row[name] for name in VALUE_COLUMNS}))
    return found


# ------------------------------------------------------------------------------ the scenario


def traffic() -> list[UsageEvent]:
    """Two minutes of vhost "a" on two replicas and of vhost "b" on one, every counter set."""
    events = []
    for i in range(12):
        events.append(
            event(
                i,
                vhost="a",
                replica="r1",
                start_ms=T0 + i * 10 * SECOND,
                **{name: (i + 1) * (n + 1) for n, name in enumerate(SUMMED_FIELDS)},
                connections=3,
                peak_connections=3 + i % 4,
            )
        )
    for i in range(6):
        events.append(
            event(
                i,
                vhost="a",
                replica="r2",
                start_ms=T0 + 30 * SECOND + i * 10 * SECOND,
                published_messages=1000 + i,
                delivered_bytes=7,
                peak_connections=10,
            )
        )
    for i in range(4):
        events.append(
            event(
                100 + i,
                vhost="/b",
                replica="r1",
                namespace="public/b",
                start_ms=T0 + 50 * MINUTE + i * 10 * SECOND,
                routed_messages=5,
                routed_bytes=500,
                returned_messages=1,
                returned_bytes=100,
                acknowledged_messages=4,
                peak_connections=1,
            )
        )
    return events


def test_known_events_roll_up_exactly_once_across_a_crash(
    pulsar_stack: StackEndpoints, postgres: PostgresServer, topic: str, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.conf"
    config.write_text(
        "brokerServiceURL=" + pulsar_stack.broker_url + "\n"
        "brokerWebServiceURL=" + pulsar_stack.web_url + "\n"
        "configurationStoreServers=" + pulsar_stack.zookeeper + "\n"
        f"rollupWindowSeconds={','.join(map(str, WINDOWS))}\n"
        f"rollupWatermarkSeconds={WATERMARK_SECONDS}\n"
        "rollupTriggerSeconds=1\n"
        f"rollupCheckpointLocation={tmp_path / 'checkpoint'}\n"
        f"rollupParquetPath={tmp_path / 'parquet'}\n"
        f"rollupPostgresUrl={postgres.url}\n"
    )
    producer = EventProducer(pulsar_stack.broker_url, topic)
    try:
        sent = traffic()
        producer.send(sent)
        # Retried sends: the same ids again (also across replicas' sequence numbers).
        producer.send([sent[3], sent[7], sent[13], sent[3]])
        malformed = [
            producer.send_raw(b"not json"),
            producer.send_raw(b'{"schema_version": 2, "event_id": "x"}'),
        ]
        # The clock: 2 h later, so the watermark closes every window above.
        clock = [event(0, vhost="clock", replica="clock", start_ms=T0 + 2 * HOUR)]
        producer.send(clock)
        first_watermark = T0 + 2 * HOUR - WATERMARK_SECONDS * SECOND
        phase_one = expected_rows(sent + clock, first_watermark)
        assert len(phase_one) == 5  # a: 2 minutes + 1 hour; /b: 1 minute + 1 hour

        # Run 1: SIGKILLs itself between writing a batch and committing it.
        crash = Job(config, topic, tmp_path / "run1.log", {"ROLLUP_FAULT_CRASH_AFTER_WRITE": "1"})
        code = crash.wait_exit(timeout=300)
        assert code == -signal.SIGKILL, crash.text()[-5000:]
        written_before_crash = postgres_rows(postgres.url)
        assert written_before_crash, "run 1 wrote nothing before it crashed"
        assert written_before_crash.items() <= phase_one.items()

        # Run 2: replays the uncommitted batch, then takes new events and is SIGKILLed
        # (the whole process group: driver, JVM, Python workers) as soon as it has read them.
        killed = Job(config, topic, tmp_path / "run2.log", {})
        try:
            wait_until(lambda: postgres_rows(postgres.url) == phase_one, 300, "phase one", killed)
            within = event(
                1,
                vhost="a",
                replica="r2-late",
                start_ms=first_watermark + 20 * SECOND,
                published_messages=11,
                published_bytes=1100,
                peak_connections=2,
            )
            beyond = event(
                2,
                vhost="a",
                replica="r2-late",
                start_ms=T0 + 20 * SECOND,
                published_messages=999,
                peak_connections=99,
            )
            clock2 = event(1, vhost="clock", replica="clock", start_ms=T0 + 3 * HOUR + 5 * SECOND)
            # One batched entry: both queries take all three in one micro-batch.
            producer.send_batch([within, beyond, clock2])
            wait_until(
                lambda: len(re.findall(r"batch \d+: 3 events in", killed.text())) == 2,
                120,
                "both queries of run 2 to read the new events",
                killed,
            )
        finally:
            killed.kill()

        # Run 3: from the checkpoint again, to the end; then a graceful stop.
        final_watermark = clock2.window_start_ms - WATERMARK_SECONDS * SECOND
        expected = expected_rows([*sent, *clock, within, clock2], final_watermark)
        assert len(expected) > len(phase_one)
        job = Job(config, topic, tmp_path / "run3.log", {})
        try:
            wait_until(lambda: postgres_rows(postgres.url) == expected, 300, "phase two", job)
            assert job.stop() == 0, job.text()[-5000:]
        finally:
            job.stop()
    finally:
        producer.close()

    # Parquet: the same rows, each exactly once (the replayed batch overwrote its first write).
    parquet = parquet_rows(tmp_path / "parquet")
    keys = [key for key, _ in parquet]
    assert len(keys) == len(set(keys)), "a row was written twice to Parquet"
    assert dict(parquet) == expected
    # Partitioned by date first.
    # (Spark's staging directories start with "."; readers skip them.)
    partitions = [p.name for p in (tmp_path / "parquet").iterdir() if p.is_dir()]
    assert [name for name in partitions if not name.startswith((".", "_"))] == ["date=2026-01-01"]

    logs = crash.text() + killed.text() + job.text()
    for message_id in malformed:
        assert f"message id {message_id}" in logs
    assert re.search(r"\b[1-9]\d* duplicates dropped", logs)
    # The event beyond the watermark: dropped (the sums above), and said so by both queries.
    late_lines = re.findall(r"(rollup-\d+s) batch \d+: .* ([1-9]\d*) late events dropped", logs)
    assert {name for name, _count in late_lines} == {"rollup-60s", "rollup-3600s"}
