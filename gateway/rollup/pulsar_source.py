"""A Spark Structured Streaming source of usage events from a Pulsar topic.

Registered with ``spark.dataSource.register(UsageEventSource)`` and read with
``spark.readStream.format("starlight-usage-events").options(**source_options(...)).load()``.
Spark's Python data source API (``pyspark.sql.datasource``, Spark 4.2+) drives it:

* On the driver, a long-lived Python process holds :class:`UsageEventStreamReader`. Per trigger
  it asks each partition of the topic for its last message id (``latestOffset``); Spark writes
  the batch's range to the checkpoint's offset log before running it; once the batch is
  committed Spark calls ``commit``, which moves this job's durable subscription up to it.
* On the executors, one task per partition with new messages opens a pulsar-client ``Reader``
  at the range's start and reads up to its end (:func:`read_range`). The range is fixed, so a
  replayed batch (after a crash) reads the same messages again: the offsets are replayable.

The durable subscription (option ``subscription``) is never read from: it only pins the
messages the job has not committed yet, so that Pulsar's retention cannot delete them while the
job is down. Its cursor is *not* the job's position: the checkpoint is.

A payload that is not a usage event (:class:`MalformedUsageEvent`) is skipped with a log line
naming its message id; it never fails the batch.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from gateway.observability.usage_event import MalformedUsageEvent, UsageEvent
from gateway.pulsar.client import ClientOptions
from gateway.rollup import positions

__all__ = [
    "FORMAT",
    "ROW_FIELDS",
    "SCHEMA_DDL",
    "PartitionRange",
    "UsageEventSource",
    "read_range",
]

log = logging.getLogger("gateway.rollup.source")

FORMAT: Final = "starlight-usage-events"

#: Every field of the event, then where it came from. Times stay epoch milliseconds here; the
#: job turns them into timestamps (cheaper in the JVM than as Python datetimes).
ROW_FIELDS: Final = (
    *(f.name for f in dataclasses.fields(UsageEvent)),
    "message_id",  # ledger:entry:batch, for tracing a row back to its Pulsar message
    "publish_time_ms",  # when Pulsar accepted it (for the lag and the end-to-end delay)
)
SCHEMA_DDL: Final = ", ".join(
    [
        f"{f.name} {'STRING' if str(f.type) == 'str' else 'BIGINT'}"
        for f in dataclasses.fields(UsageEvent)
    ]
    + ["message_id STRING", "publish_time_ms BIGINT"]
)

# How long a task waits for a message the broker said is there before failing the task (and
# with it the batch, which is then replayed): a partial batch would break exactly-once.
_READ_TIMEOUT_MS: Final = 30_000


@dataclass(frozen=True)
class PartitionRange(InputPartition):
    """The messages ``(start, end]`` of one partition topic (positions as in positions.py)."""

    topic: str
    start: str
    end: str


# ------------------------------------------------------------------------------ options


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The source's options, as Spark passes them (strings)."""

    service_url: str
    topic: str
    subscription: str
    starting_offsets: str = "earliest"
    # Resolved on the driver from the gateway's broker-client keys: executors read no files
    # except the TLS ones the C++ client opens itself.
    token: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_trust_certs_file: str = ""
    tls_allow_insecure: bool = False
    tls_validate_hostname: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        def text(name: str, default: str = "") -> str:
            return str(options.get(name, default) or default).strip()

        def flag(name: str) -> bool:
            value = text(name, "false").lower()
            if value not in ("true", "false"):
                raise ValueError(f"option {name}: expected true or false, got {value!r}")
            return value == "true"

        missing = [name for name in ("serviceUrl", "topic", "subscription") if not text(name)]
        if missing:
            raise ValueError(f"{FORMAT}: missing option(s) {', '.join(missing)}")
        starting = text("startingOffsets", "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise ValueError(f"option startingOffsets: earliest or latest, got {starting!r}")
        return cls(
            service_url=text("serviceUrl"),
            topic=text("topic"),
            subscription=text("subscription"),
            starting_offsets=starting,
            token=text("token"),
            tls_cert_file=text("tlsCertFile"),
            tls_key_file=text("tlsKeyFile"),
            tls_trust_certs_file=text("tlsTrustCertsFile"),
            tls_allow_insecure=flag("tlsAllowInsecureConnection"),
            tls_validate_hostname=flag("tlsHostnameVerification"),
        )

    def client(self) -> Any:
        """A new ``pulsar.Client`` (create it in the process that uses it: forks lose it)."""
        from gateway.pulsar.client import build_native_client

        return build_native_client(
            ClientOptions(
                service_url=self.service_url,
                auth_token=self.token or None,
                tls_trust_certs_file_path=self.tls_trust_certs_file or None,
                tls_allow_insecure_connection=self.tls_allow_insecure,
                tls_validate_hostname=self.tls_validate_hostname,
                tls_certificate_file_path=self.tls_cert_file or None,
                tls_private_key_file_path=self.tls_key_file or None,
                auth_tls=bool(self.tls_cert_file and not self.token),
                log_level="error",
            )
        )


# ------------------------------------------------------------------------------ executors


def read_range(client: Any, part: PartitionRange) -> Iterator[tuple[Any, ...]]:
    """The usage events of ``(part.start, part.end]``, as rows of :data:`ROW_FIELDS`.

    The reader starts *at* ``start`` (inclusive) and this loop drops everything up to it
    itself: pulsar-client's own exclusive start is ambiguous for an entry holding a batch
    (positions.py).
    """
    start = positions.sort_key(positions.decode(part.start))
    end = positions.sort_key(positions.decode(part.end))
    reader = client.create_reader(
        part.topic, positions.decode(part.start), start_message_id_inclusive=True
    )
    try:
        while reader.has_message_available():
            message = reader.read_next(_READ_TIMEOUT_MS)
            message_id = message.message_id()
            key = positions.sort_key(message_id)
            if key <= start:
                continue
            if key > end:
                break
            row = _row(part.topic, message, message_id)
            if row is not None:
                yield row
            if key == end:
                break
    finally:
        reader.close()


def _row(topic: str, message: Any, message_id: Any) -> tuple[Any, ...] | None:
    try:
        event = UsageEvent.from_json(message.data())
    except MalformedUsageEvent as error:
        _worker_log().warning(
            "skipped a malformed usage event: topic %s message id %s: %s",
            topic,
            positions.describe(message_id),
            error,
        )
        return None
    return (
        *dataclasses.astuple(event),
        positions.describe(message_id),
        message.publish_timestamp(),
    )


def _worker_log() -> logging.Logger:
    """The source's logger, writing to stderr even in a Python worker nobody configured
    (Spark copies its workers' stderr into the executor's log)."""
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    return log


# ------------------------------------------------------------------------------ driver


class UsageEventSource(DataSource):
    """``format("starlight-usage-events")``: options ``serviceUrl``, ``topic``,
    ``subscription``, ``startingOffsets`` (earliest|latest) and the credentials of
    :class:`SourceOptions`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA_DDL

    def streamReader(self, schema: StructType) -> UsageEventStreamReader:
        return UsageEventStreamReader(SourceOptions.parse(self.options))


class UsageEventStreamReader(DataSourceStreamReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: Any = None
        # One consumer per partition topic on the job's durable subscription: it answers
        # "last message id" and pins what the job has not committed.
        self._consumers: dict[str, Any] = {}

    # -- Spark's calls (driver) --------------------------------------------------------

    def initialOffset(self) -> dict[str, str]:
        if self.options.starting_offsets == "earliest":
            return {topic: positions.EARLIEST for topic in self._partitions()}
        return {topic: self._last(topic, positions.EARLIEST) for topic in self._partitions()}

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:
        # Every message available now (the default read limit, ReadAllAvailable).
        return {
            topic: self._last(topic, start.get(topic, positions.EARLIEST))
            for topic in self._partitions()
        }

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[PartitionRange]:
        ranges = []
        for topic, last in sorted(end.items()):
            first = start.get(topic, positions.EARLIEST)
            if positions.sort_key(positions.decode(first)) < positions.sort_key(
                positions.decode(last)
            ):
                ranges.append(PartitionRange(topic, first, last))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        # Runs on an executor, in a Python worker: its own client, closed with the task.
        assert isinstance(partition, PartitionRange)
        client = self.options.client()
        try:
            yield from read_range(client, partition)
        finally:
            client.close()

    def commit(self, end: dict[str, str]) -> None:
        """Spark has committed everything up to ``end``: let Pulsar's retention have it."""
        for topic, position in end.items():
            message_id = positions.decode(position)
            if message_id.entry_id() < 0:
                continue  # nothing read from this partition yet
            try:
                self._consumer(topic).acknowledge_cumulative(message_id)
            except Exception as error:  # retention only: never worth failing the job
                log.warning(
                    "could not move subscription %s on %s to %s: %s",
                    self.options.subscription,
                    topic,
                    positions.describe(message_id),
                    error,
                )

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
            self._consumers.clear()

    # -- helpers -------------------------------------------------------------------------

    def _pulsar(self) -> Any:
        if self._client is None:
            self._client = self.options.client()
        return self._client

    def _partitions(self) -> list[str]:
        # Asked at every trigger: a topic's partitions can be added while the job runs.
        return list(self._pulsar().get_topic_partitions(self.options.topic))

    def _consumer(self, topic: str) -> Any:
        consumer = self._consumers.get(topic)
        if consumer is None:
            import pulsar

            consumer = self._pulsar().subscribe(
                topic,
                self.options.subscription,
                # Failover: a restarted job is let in even while the broker still holds the
                # dead job's consumer.
                consumer_type=pulsar.ConsumerType.Failover,
                initial_position=pulsar.InitialPosition.Earliest,
                # Never receives: it exists for its cursor and get_last_message_id.
                receiver_queue_size=0,
            )
            self._consumers[topic] = consumer
        return consumer

    def _last(self, topic: str, start: str) -> str:
        """The position of ``topic``'s last message, or ``start`` if nothing came after it."""
        last = self._consumer(topic).get_last_message_id()
        if positions.sort_key(last) > positions.sort_key(positions.decode(start)):
            return positions.encode(last)
        return start
