"""The ``vhost`` label is the vhost's name on every replica, also on a leader none of whose
clients ever opened the vhost (it knows the vhost only as the Pulsar namespace it leads):
dashboards filter on ``vhost`` (``$vhost``), which starlight_vhost_connections lists by name."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from tests.integration.observability.scrape import metrics_port, wait_metrics
from tests.support.clients import connect
from tests.support.fleet import Fleet

pytestmark = pytest.mark.integration


def test_a_leader_that_never_had_a_connection_labels_queue_gauges_with_the_vhost_name(
    fleet: Fleet, pulsar_stack: Any
) -> None:
    namespace = f"public/{fleet.namespace}"  # the vhost "/" of these replicas
    # A first replica makes the queue and its messages, and goes.
    first = fleet.start("first").wait_ready()
    connection = connect(first.port)  # vhost "/"
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("waiting", durable=True)
    for body in (b"1", b"2", b"3"):
        channel.basic_publish("", "waiting", body)
    connection.close()
    first.signal(signal.SIGTERM)
    assert first.wait_exit(60) == 0

    # A second one loads the vhost at start and leads it: no client ever connects to it.
    leader = fleet.start("leader").wait_ready()
    leader.wait_for(rf"now leads namespace {namespace}$", timeout=60)
    port = metrics_port(leader)

    def queue_gauges(samples: dict[Any, float]) -> dict[tuple[str, str], float]:
        return {
            (dict(labels)["vhost"], dict(labels)["queue"]): value
            for (name, labels), value in samples.items()
            if name == "rabbitmq_queue_messages"
        }

    samples = wait_metrics(port, lambda s: bool(queue_gauges(s)), timeout=60)
    assert queue_gauges(samples) == {("/", "waiting"): 3}
    labels = {dict(labels).get("vhost") for (_, labels) in samples}
    assert namespace not in labels  # the label it had before: vhost="public/<namespace>"
    assert (
        samples[("starlight_leader", frozenset({("pulsar_namespace", namespace), ("vhost", "/")}))]
        == 1
    )
    assert not any(name == "starlight_vhost_connections" for (name, _) in samples)
