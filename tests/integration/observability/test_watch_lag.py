"""starlight_metadata_watch_lag_seconds on real gateway processes: a queue declared through
one replica is one observation in the other's histogram; the start-up load is none."""

from __future__ import annotations

import pika
import pytest

from tests.integration.observability.scrape import metrics_port, scrape, value, wait_metrics
from tests.support.fleet import Fleet

pytestmark = pytest.mark.integration

LAG = "starlight_metadata_watch_lag_seconds"


def declare(port: int, *queues: str) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        channel = connection.channel()
        for queue in queues:
            channel.queue_declare(queue)
    finally:
        connection.close()


def test_a_declare_on_one_replica_is_a_watch_lag_observation_on_the_other(fleet: Fleet) -> None:
    first = fleet.start("replica-1").wait_ready()
    declare(first.port, *(f"before-{index}" for index in range(20)))
    # Started after those queues exist: it reads them while loading, which is not lag.
    second = fleet.start("replica-2").wait_ready()
    first_metrics, second_metrics = metrics_port(first), metrics_port(second)
    _, loaded = scrape(second_metrics)
    assert value(loaded, f"{LAG}_count") == 0

    declare(first.port, "after")
    samples = wait_metrics(second_metrics, lambda s: value(s, f"{LAG}_count") >= 1)
    assert value(samples, f"{LAG}_count") >= 1
    assert value(samples, f"{LAG}_bucket", le="+Inf") == value(samples, f"{LAG}_count")
    # Same host, one clock: a change seen within the 30 s wait has a lag below that.
    assert 0 <= value(samples, f"{LAG}_sum") < 30 * value(samples, f"{LAG}_count")
    # The declaring replica's view had the queue when its write returned: nothing to report.
    _, own = scrape(first_metrics)
    assert value(own, f"{LAG}_count") == 0
