"""The rollup job: per-vhost throughput windows from the gateways' usage events, exactly once.

Pipeline, one streaming query per window length (rollupWindowSeconds)::

    Pulsar usage-events topic ── UsageEventSource (offsets: message ids per partition)
      → event_time = the event's window start
      → watermark (rollupWatermarkSeconds) → dropDuplicatesWithinWatermark(event_id)
      → sum per (window, vhost, replica)                             [Spark state, append mode]
      → foreachBatch: sum over replicas → Parquet (date/window/batch) and/or PostgreSQL (upsert)

One query per length rather than a union of several aggregations in one query: in Spark 4.3
the second branch of such a union never sees the watermark advance, so its windows never close
(and its state grows forever). Separate queries also keep separate checkpoints, so a window
length can be added later without touching the others.

Append mode: a (window, vhost) row leaves the aggregation once, when the watermark passes the
window's end, and every replica's part of it leaves in that same batch (they share the
window's end), so the last sum over replicas is a plain batch aggregation.

Exactly once (docs/rollup.md): the batch's offsets are in the checkpoint before it runs, the
source re-reads the same messages on a replay, the state is the checkpointed state of the batch
before, so a replay produces the same rows; both sinks overwrite by key (batch id for Parquet,
(vhost, window) for PostgreSQL), so writing them twice leaves them as writing them once.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from gateway.rollup.pulsar_source import FORMAT, UsageEventSource
from gateway.rollup.rows import OUTPUT_COLUMNS, SUMMED_FIELDS
from gateway.rollup.settings import RollupSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["final_rows", "per_replica_windows", "run", "start_query", "usage_events"]

log = logging.getLogger("gateway.rollup")

QUERY_PREFIX: Final = "starlight-rollup"

#: Fault injection for the exactly-once tests (docs/rollup.md): when set (to anything), the
#: driver SIGKILLs itself right after the first batch that wrote rows to the sinks, before
#: Spark commits that batch.
CRASH_AFTER_WRITE_ENV: Final = "ROLLUP_FAULT_CRASH_AFTER_WRITE"


def query_name(window_seconds: int) -> str:
    return f"{QUERY_PREFIX}-{window_seconds}s"


def usage_events(spark: SparkSession, settings: RollupSettings, window_seconds: int) -> DataFrame:
    """The deduplicated event stream, with its event-time watermark."""
    from pyspark.sql import functions as F

    spark.dataSource.register(UsageEventSource)
    options = dict(settings.source_options)
    # Each query pins what *it* has not committed.
    options["subscription"] = f"{settings.subscription}-{window_seconds}s"
    return (
        spark.readStream.format(FORMAT)
        .options(**options)
        .load()
        # The counters happened within [start, end): the start is always inside that span.
        .withColumn("event_time", F.timestamp_millis("window_start_ms"))
        .withWatermark("event_time", f"{settings.watermark_seconds} seconds")
        # A retried send carries the same event id; within the watermark it is dropped here,
        # and anything older than the watermark is dropped (and counted) as late.
        .dropDuplicatesWithinWatermark(["event_id"])
    )


def per_replica_windows(events: DataFrame, window_seconds: int) -> DataFrame:
    """The sums per (window, vhost, replica): the query's streaming state."""
    from pyspark.sql import functions as F

    return (
        events.groupBy(
            F.window("event_time", f"{window_seconds} seconds").alias("window"),
            "vhost",
            "namespace",
            "replica",
        )
        .agg(
            *(F.sum(name).alias(name) for name in SUMMED_FIELDS),
            F.max("peak_connections").alias("peak_connections"),
            F.count(F.lit(1)).alias("events"),
        )
        .withColumn("window_seconds", F.lit(window_seconds))
    )


def final_rows(batch: DataFrame, batch_id: int) -> DataFrame:
    """A batch of finished (window, vhost, replica) sums → the output rows (OUTPUT_COLUMNS)."""
    from pyspark.sql import functions as F

    summed = batch.groupBy("window_seconds", "window", "vhost", "namespace").agg(
        *(F.sum(name).alias(name) for name in SUMMED_FIELDS),
        F.sum("peak_connections").alias("peak_connections"),
        F.sum("events").alias("events"),
        F.count(F.lit(1)).cast("int").alias("replicas"),
    )
    return summed.select(
        "vhost",
        "namespace",
        F.col("window_seconds").cast("int").alias("window_seconds"),
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        *SUMMED_FIELDS,
        "peak_connections",
        "events",
        "replicas",
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.to_date("window.start").alias("date"),
    )


class BatchWriter:
    """The ``foreachBatch`` function: both sinks, each idempotent per batch."""

    def __init__(self, settings: RollupSettings, window_seconds: int) -> None:
        from gateway.rollup.postgres_sink import PostgresSink

        self.settings = settings
        self.window_seconds = window_seconds
        self.postgres = (
            PostgresSink(settings.postgres_url, settings.postgres_table)
            if settings.postgres_url
            else None
        )
        self.rows_written: dict[int, int] = {}
        self._crash_after_write = bool(os.environ.get(CRASH_AFTER_WRITE_ENV))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = final_rows(batch, batch_id).collect()
        if rows:
            if self.settings.parquet_path:
                self._write_parquet(batch.sparkSession, rows)
            if self.postgres is not None:
                self.postgres.upsert([row.asDict() for row in rows])
        self.rows_written[batch_id] = len(rows)
        if rows and self._crash_after_write:
            log.warning(
                "%s: killing the driver after writing batch %d, before its commit",
                CRASH_AFTER_WRITE_ENV,
                batch_id,
            )
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)

    def _write_parquet(self, spark: SparkSession, rows: list[Any]) -> None:
        # partitionOverwriteMode=dynamic (set on the session) replaces exactly the
        # date=/window_seconds=/batch_id= directories this batch writes: a replay overwrites
        # its own first attempt; files of other batches and queries are never touched.
        frame = spark.createDataFrame(rows, schema=_output_schema())
        (
            frame.coalesce(1)
            .write.mode("overwrite")
            .partitionBy("date", "window_seconds", "batch_id")
            .parquet(self.settings.parquet_path)
        )


@functools.cache
def _output_schema() -> Any:
    from pyspark.sql.types import (
        DateType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    types = {
        "vhost": StringType(),
        "namespace": StringType(),
        "window_seconds": IntegerType(),
        "window_start": TimestampType(),
        "window_end": TimestampType(),
        "replicas": IntegerType(),
        "date": DateType(),
    }
    return StructType([StructField(name, types.get(name, LongType())) for name in OUTPUT_COLUMNS])


def start_query(
    spark: SparkSession, settings: RollupSettings, window_seconds: int
) -> tuple[StreamingQuery, BatchWriter]:
    writer = BatchWriter(settings, window_seconds)
    windows = per_replica_windows(usage_events(spark, settings, window_seconds), window_seconds)
    checkpoint = f"{settings.checkpoint_location.rstrip('/')}/{window_seconds}s"
    query = (
        windows.writeStream.queryName(query_name(window_seconds))
        .outputMode("append")
        .foreachBatch(writer)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{settings.trigger_seconds} seconds")
        .start()
    )
    return query, writer


# ------------------------------------------------------------------------------ progress


def progress_line(progress: Any, rows_out: int | None, now: float | None = None) -> str:
    """One log line per batch: rows in and out, duplicates and late events dropped, lag."""
    operators = list(progress.stateOperators or [])
    dedup = [op for op in operators if "dedup" in op.operatorName.lower()]
    late = max((op.numRowsDroppedByWatermark for op in dedup), default=0)
    duplicates = max(
        (int(op.customMetrics.get("numDroppedDuplicateRows", 0)) for op in dedup), default=0
    )
    events_in = int(progress.numInputRows)
    watermark = (progress.eventTime or {}).get("watermark", "-")
    newest = (progress.eventTime or {}).get("max")
    lag = ""
    if newest:
        from datetime import datetime

        newest_at = datetime.fromisoformat(newest.replace("Z", "+00:00")).timestamp()
        seconds = (now or time.time()) - newest_at
        lag = f", event-time lag {seconds:.1f}s"
    return (
        f"{progress.name} batch {progress.batchId}: {events_in} events in, "
        f"{duplicates} duplicates dropped, {late} late events dropped (beyond the watermark), "
        f"{'?' if rows_out is None else rows_out} rows out; watermark {watermark}{lag}; "
        f"took {progress.batchDuration} ms"
    )


def _progress_listener(writers: dict[str, BatchWriter]) -> Any:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class ProgressLogger(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            log.info("query %s started (run %s)", event.name, event.runId)

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            writer = writers.get(progress.name)
            rows_out = None if writer is None else writer.rows_written.pop(progress.batchId, None)
            if progress.numInputRows or rows_out:
                log.info("%s", progress_line(progress, rows_out))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            if event.exception:
                log.error("query stopped with an error: %s", event.exception.splitlines()[0])

    return ProgressLogger()


# ------------------------------------------------------------------------------ session


def spark_session(master: str | None, conf: dict[str, str]) -> SparkSession:
    """Local mode (``local[*]``) unless ``master`` is given or spark-submit chose one."""
    # Executors' Python workers must be this interpreter (its virtualenv has pyarrow and
    # pulsar-client); spark-submit users set it themselves.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(QUERY_PREFIX)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # started by spark-submit
    if master or not submitted:
        builder = builder.master(master or "local[*]")
    builder = builder.config("spark.sql.session.timeZone", "UTC").config(
        "spark.sql.sources.partitionOverwriteMode", "dynamic"
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(conf.get("spark.log.level", "WARN"))
    if "spark.sql.shuffle.partitions" not in conf and not spark.sparkContext.getConf().contains(
        "spark.sql.shuffle.partitions"
    ):
        # Spark's default of 200 state-store partitions costs seconds per batch for a few
        # hundred rows. Fixed in the checkpoint by the first run.
        spark.conf.set(
            "spark.sql.shuffle.partitions", str(max(1, spark.sparkContext.defaultParallelism))
        )
    return spark


def run(
    settings: RollupSettings, master: str | None = None, conf: dict[str, str] | None = None
) -> int:
    """Run until SIGTERM/SIGINT (0) or until the query fails (1)."""
    if settings.postgres_url:
        # Before Spark starts: an unreachable database is a one-line error at once.
        from psycopg import Error as DatabaseError

        from gateway.rollup.postgres_sink import PostgresSink

        try:
            PostgresSink(settings.postgres_url, settings.postgres_table).create_table()
        except DatabaseError as error:
            log.error("cannot use rollupPostgresUrl: %s", str(error).strip().splitlines()[0])
            return 1
    spark = spark_session(master, conf or {})
    stop = threading.Event()
    previous = _on_signals(lambda: stop.set())
    try:
        writers: dict[str, BatchWriter] = {}
        spark.streams.addListener(_progress_listener(writers))
        queries = []
        for seconds in settings.window_seconds:
            query, writer = start_query(spark, settings, seconds)
            writers[query_name(seconds)] = writer
            queries.append(query)
        log.info("rollup running: %r", settings)
        while not stop.is_set() and all(query.isActive for query in queries):
            stop.wait(1)
        return _stop(queries, stop.is_set())
    finally:
        _restore(previous)
        with contextlib.suppress(Exception):  # the JVM may be gone already (see _stop)
            spark.stop()


def _stop(queries: list[StreamingQuery], requested: bool) -> int:
    """Stop what still runs; 1 if a query failed on its own."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]

    try:
        failed = [query for query in queries if not query.isActive and query.exception()]
        for query in queries:
            if query.isActive:
                # An interrupted batch is run again at the next start (docs/rollup.md).
                log.info("stopping %s", query.name)
                query.stop()
    except Py4JError:
        # A signal sent to the whole process group (systemd's default) stops Spark's JVM
        # as well, maybe in the middle of a batch: like a crash, which the checkpoint covers.
        log.warning("Spark stopped under us; the next start resumes from the checkpoint")
        return 0 if requested else 1
    for query in failed:
        log.error("%s failed: %s", query.name, str(query.exception()).splitlines()[0])
    return 1 if failed else 0


def _on_signals(handler: Callable[[], None]) -> dict[int, Any]:
    previous: dict[int, Any] = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, lambda *_: handler())
    return previous


def _restore(previous: dict[int, Any]) -> None:
    for signum, old in previous.items():
        signal.signal(signum, old)
