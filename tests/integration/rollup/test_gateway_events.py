"""The two halves together: a real gateway's usage events, read by the rollup's Pulsar source
(the calls Spark makes, without Spark), add up to the AMQP traffic that was sent."""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pika
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from gateway.rollup.pulsar_source import ROW_FIELDS, SourceOptions, UsageEventStreamReader
from tests.integration.fleet.conftest import namespace
from tests.support.fleet import Fleet

__all__ = ["namespace"]

pytestmark = pytest.mark.integration


def test_the_source_reads_what_a_gateway_publishes(
    tmp_path: Path, pulsar_stack: Any, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = f"persistent://public/{namespace}/usage"
    fleet = Fleet(
        tmp_path,
        pulsar_stack,
        namespace,
        extra_config=f"usageEventsTopic={topic}\nusageEventsIntervalSeconds=1\n",
    )
    reader = UsageEventStreamReader(
        SourceOptions(service_url=pulsar_stack.broker_url, topic=topic, subscription="rollup")
    )
    try:
        (replica,) = fleet.replicas(1)
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", replica.port))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("billed")
        for _ in range(30):
            channel.basic_publish("", "billed", b"y" * 25)
        connection.close()

        rows: list[dict[str, Any]] = []
        offset = reader.initialOffset()
        deadline = time.monotonic() + 60
        with caplog.at_level(logging.WARNING, logger="gateway.rollup.source"):
            while sum(row["published_messages"] for row in rows) < 30:
                assert time.monotonic() < deadline, f"rows so far: {rows}"
                end = reader.latestOffset(offset, ReadAllAvailable())
                for part in reader.partitions(offset, end):
                    rows += [dict(zip(ROW_FIELDS, row, strict=True)) for row in reader.read(part)]
                offset = end
                time.sleep(0.5)
        assert "malformed" not in caplog.text
        mine = [row for row in rows if row["vhost"] == "/"]
        assert sum(row["published_messages"] for row in mine) == 30
        assert sum(row["published_bytes"] for row in mine) == 30 * 25
        assert sum(row["routed_messages"] for row in mine) == 30
        assert len({row["event_id"] for row in rows}) == len(rows)
    finally:
        reader.stop()
        for process in fleet.processes:
            if process.process is not None and process.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait_exit(60)
        fleet.close()
