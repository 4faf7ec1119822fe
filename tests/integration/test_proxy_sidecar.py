"""The proxy extension's sidecar mode (``amqpGatewayMode=sidecar``): the NAR in a real Pulsar
proxy (ProxyServiceStarter) spawns nothing and relays to a gateway started separately, as the
gateway container of the Apache Pulsar chart's proxy pod would run it (listening on the Unix
socket of a directory both share, PROXY v2 as in child mode). The proxy's /status.html, which
the chart's probes read through statusFilePath, follows the gateway: unready while it is gone,
ready again once it is back.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest

from tests.support.clients import get_bodies, unique
from tests.support.proxy_extension import (
    GATEWAY_COMMAND,
    START_TIMEOUT,
    RunningProxy,
    connect,
    pulsar_proxy,
    wait_until,
)
from tests.support.pulsar_gateway import fresh_namespace

pytestmark = pytest.mark.integration


class SidecarGateway:
    """``starlight-rabbitmq`` as the sidecar container runs it: its own configuration, listening
    on ``<shared>/amqp.sock`` and trusting the PROXY headers that arrive there."""

    def __init__(self, shared: Path, stack: Any, namespace: str) -> None:
        self.socket = shared / "amqp.sock"
        self.conf = shared.parent / "gateway.conf"
        self.conf.write_text(
            f"brokerServiceURL={stack.broker_url}\n"
            f"brokerWebServiceURL={stack.web_url}\n"
            f"configurationStoreServers={stack.zookeeper}\n"
            f"amqpDefaultNamespace={namespace}\n"
            f"amqpListeners=amqp+unix://{self.socket}\n"
            "amqpProxyProtocolTrustedNetworks=unix\n"
        )
        self.log = shared.parent / "gateway.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [GATEWAY_COMMAND, "-c", str(self.conf)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        """SIGKILL, as an OOM kill: the socket file stays behind, nobody answers on it."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def status(proxy: RunningProxy) -> int:
    """The proxy's /status.html: what the Apache Pulsar chart's readiness probe asks."""
    try:
        return httpx.get(f"http://127.0.0.1:{proxy.web_port}/status.html", timeout=5).status_code
    except httpx.TransportError:
        return -1


@pytest.fixture(scope="module")
def namespace(pulsar_stack: Any) -> Iterator[str]:
    with fresh_namespace(pulsar_stack) as name:
        yield name


def test_sidecar_mode_relays_to_a_separate_gateway_and_follows_its_health(
    pulsar_stack: Any, namespace: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    pulsar_proxy.fresh_nar()
    shared = tmp_path / "shared"  # the emptyDir both containers mount
    shared.mkdir()
    status_file = tmp_path / "status"
    status_file.write_text("OK\n")  # the chart writes it before `bin/pulsar proxy`
    gateway = SidecarGateway(shared, pulsar_stack, namespace)
    gateway.start()  # the gateway and the proxy JVM start side by side, as in a pod
    proxy = RunningProxy(
        tmp_path / "proxy",
        pulsar_stack,
        {
            "amqpGatewayMode": "sidecar",
            "amqpGatewayWorkDirectory": str(shared),
            "statusFilePath": str(status_file),
        },
        gateway_command=None,
    )
    try:
        wait_until(
            lambda: (
                "Successfully bound extension `rabbitmq`" in proxy.text()
                and "the gateway container answers at" in proxy.text()
            ),
            lambda: f"the proxy relaying to the sidecar:\n{proxy.tail()}",
            START_TIMEOUT,
        )
        text = proxy.text()
        assert "started the gateway" not in text  # nothing spawned
        assert f"sidecar mode, listeners [amqp://127.0.0.1:{proxy.amqp_port}]" in text
        # The web server (/status.html) starts after the extensions.
        wait_until(lambda: status(proxy) == 200, "/status.html to say 200", 60)
        ready_after = time.monotonic() - started

        queue = unique("sidecar")
        connection = connect(proxy.amqp_port)
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        confirmed = [f"before {n}".encode() for n in range(10)]
        for body in confirmed:
            channel.basic_publish("", queue, body)
        client = "{}:{}".format(*connection._impl._transport._sock.getsockname()[:2])
        # The PROXY v2 header reached the separately started gateway: it names the real client.
        wait_until(
            lambda: f"connection opened peer={client} " in gateway.log.read_text(errors="replace"),
            f"the gateway logging peer={client}",
            20,
        )

        # The gateway container dies: the client's connection goes, the proxy reports not
        # ready, and new AMQP connections are closed at once with a clear line in its log.
        gateway.kill()
        with pytest.raises(pika.exceptions.AMQPError):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                connection.process_data_events(time_limit=0.2)
        wait_until(lambda: status(proxy) == 404, "/status.html to say 404", 15)
        assert not status_file.exists()
        assert "the gateway container does not answer at" in proxy.text()
        assert "the proxy reports not ready" in proxy.text()
        refused_at = time.monotonic()
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            connect(proxy.amqp_port)
        assert time.monotonic() - refused_at < 10  # closed at once, not a hang
        assert proxy.process.poll() is None  # the proxy itself stays up (its Pulsar port too)

        # Back: ready again, serving, and every confirmed message is there.
        gateway.start()
        wait_until(lambda: status(proxy) == 200, "/status.html to say 200 again", 60)
        connection = connect(proxy.amqp_port, attempts=10)
        try:
            channel = connection.channel()
            got = get_bodies(channel, queue, len(confirmed), timeout=30)
            assert sorted(got) == sorted(confirmed)
            channel.queue_delete(queue)
        finally:
            connection.close()
        print(f"proxy and sidecar ready {ready_after:.1f} s after the start")
    finally:
        proxy.stop()
        gateway.stop()
    # The proxy's shutdown leaves the sidecar's directory alone (it is the gateway's socket).
    assert shared.is_dir()
