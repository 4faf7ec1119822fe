"""The metricsListener endpoint of real gateway processes: /readyz through start and drain,
and ``--workers``: one endpoint whose counts are the sum of the workers'."""

from __future__ import annotations

import signal
import socket
import time

import httpx
import pika
import pytest

from tests.integration.observability.scrape import (
    metrics_port,
    readyz,
    scrape,
    value,
    wait_metrics,
)
from tests.support.fleet import Fleet

pytestmark = pytest.mark.integration


def test_healthz_readyz_and_404(fleet: Fleet) -> None:
    (replica,) = fleet.replicas(1)
    port = metrics_port(replica)
    assert readyz(port) == (200, "ready\n")
    assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    assert httpx.get(f"http://127.0.0.1:{port}/nope").status_code == 404
    assert httpx.post(f"http://127.0.0.1:{port}/metrics").status_code == 405
    _, samples = scrape(port)
    for check in ("listening", "zookeeper", "pulsar", "metadata", "not_draining"):
        assert value(samples, "starlight_ready", check=check) == 1


def test_readyz_is_503_as_soon_as_the_drain_starts(fleet: Fleet) -> None:
    """A client that never answers Connection.Close keeps the replica draining for
    amqpConnectionCloseTimeout; meanwhile /readyz says 503 naming the drain."""
    (replica,) = fleet.replicas(1)
    port = metrics_port(replica)
    silent = socket.create_connection(("127.0.0.1", replica.port))
    # A whole AMQP handshake is not needed: the connection exists, the drain waits for it.
    silent.sendall(b"AMQP\x00\x00\x09\x01")
    try:
        silent.settimeout(10)
        assert silent.recv(4096)  # Connection.Start: the replica has this connection
        replica.signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        status, text = readyz(port)
        while status == 200 and time.monotonic() < deadline:
            time.sleep(0.05)
            status, text = readyz(port)
        assert status == 503
        assert "draining" in text
    finally:
        silent.close()
    assert replica.wait_exit(30) == 0


def test_workers_metrics_add_up_at_one_endpoint(fleet: Fleet) -> None:
    gateway = fleet.start("workers", "--workers", "2").wait_ready()
    summed_port = metrics_port(gateway, "supervisor")
    worker_ports = [metrics_port(gateway, f"worker-{index}") for index in range(2)]
    assert readyz(summed_port)[0] == 200
    # Connections spread over the workers by the kernel (SO_REUSEPORT): open until both
    # workers have served some, each publishing a known number of messages.
    sent = 0
    deadline = time.monotonic() + 60
    while True:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", gateway.port))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("summed")
        for _ in range(3):
            channel.basic_publish("", "summed", b"x" * 10)
        sent += 3
        connection.close()
        per_worker = [
            value(scrape(port)[1], "rabbitmq_global_messages_received_total")
            for port in worker_ports
        ]
        if all(per_worker) and sum(per_worker) == sent:
            break
        assert time.monotonic() < deadline, f"workers' counts {per_worker}, sent {sent}"
    summed = wait_metrics(
        summed_port,
        lambda s: value(s, "rabbitmq_connections_closed_total") == sent // 3,
    )
    assert value(summed, "rabbitmq_global_messages_received_total") == sent
    assert value(summed, "rabbitmq_global_messages_confirmed_total") == sent
    assert value(summed, "rabbitmq_connections_opened_total") == sent // 3
    # One replica to Prometheus: one identity, the configured node name without -w<i>.
    identities = [labels for (name, labels) in summed if name == "rabbitmq_identity_info"]
    assert len(identities) == 1
    assert not dict(identities[0])["rabbitmq_node"].endswith(("-w0", "-w1"))
    worker_nodes = {
        dict(labels)["rabbitmq_node"]
        for port in worker_ports
        for (name, labels) in scrape(port)[1]
        if name == "rabbitmq_identity_info"
    }
    assert {node[-3:] for node in worker_nodes} == {"-w0", "-w1"}
    gateway.signal(signal.SIGTERM)
    assert gateway.wait_exit(30) == 0


def test_a_taken_metrics_port_is_a_one_line_startup_error(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("STARLIGHT_metricsListener", f"http://127.0.0.1:{port}")
        gateway = fleet.start("taken")
        assert gateway.wait_exit(60) == 1
    errors = [line for line in gateway.output() if "cannot start" in line]
    assert errors == [
        f"starlight-rabbitmq: cannot start: cannot listen on metricsListener "
        f"http://127.0.0.1:{port}: Address already in use"
    ]
    assert not [line for line in gateway.output() if "Traceback" in line]
