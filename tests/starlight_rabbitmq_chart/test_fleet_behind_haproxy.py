"""The chart's gateway.conf, run for real: three gateway processes behind Debian's HAProxy in
TCP mode (``send-proxy-v2``, health check ``GET /readyz``), pika publishers with confirms and
consumers through the balancer, and one replica killed with SIGKILL in the middle. Every
confirmed message reaches a consumer; clients reconnect through the balancer to the survivors."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest

from tests.starlight_rabbitmq_chart.rendering import gateway_conf
from tests.starlight_rabbitmq_chart.tools import REPO_DIR, Helm
from tests.support.zookeeper import kazoo_client

pytestmark = pytest.mark.integration

REPLICAS = 3
MESSAGES = 600
QUEUE = "chart-fleet"
START_TIMEOUT = 90.0
RUN_TIMEOUT = 180.0
#: Errors after which a pika client reconnects through the balancer (a replica went away).
CONNECTION_LOST = (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Any, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)  # polling interval of a condition with a deadline, not a sync


@dataclass
class Replica:
    name: str
    amqp_port: int
    metrics_port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self, conf: Path) -> None:
        # What the Deployment does per pod (the downward API's STARLIGHT_amqpNodeName), plus
        # the loopback ports that stand in for each pod's own 5672 and 15692.
        env = dict(
            os.environ,
            STARLIGHT_amqpNodeName=self.name,
            STARLIGHT_amqpListeners=f"amqp://127.0.0.1:{self.amqp_port}",
            STARLIGHT_metricsListener=f"http://127.0.0.1:{self.metrics_port}",
            STARLIGHT_advertisedAddress="127.0.0.1",
        )
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "-c", str(conf)],
                cwd=REPO_DIR,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited:\n{self.log.read_text()[-3000:]}")
        url = f"http://127.0.0.1:{self.metrics_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        """As Kubernetes stops a pod: SIGTERM (the gateway drains and removes its records),
        SIGKILL only if it is still there after the grace period."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)


class HAProxy:
    def __init__(self, directory: Path, replicas: list[Replica]) -> None:
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        if not os.access(binary, os.X_OK):
            pytest.fail("haproxy is missing: run `make test-tools`", pytrace=False)
        self.port = free_port()
        # A short path: a unix socket's name is limited to 107 bytes.
        self._socket_dir = tempfile.TemporaryDirectory(prefix="haproxy-")
        self.stats = Path(self._socket_dir.name) / "stats.sock"
        servers = "\n".join(
            # The AMQP traffic carries PROXY v2; the health check goes, plain HTTP, to /readyz.
            f"  server {r.name} 127.0.0.1:{r.amqp_port} send-proxy-v2 check port {r.metrics_port}"
            for r in replicas
        )
        config = directory / "haproxy.cfg"
        config.write_text(
            "global\n"
            f"  stats socket {self.stats} mode 600 level admin\n"
            "defaults\n"
            "  mode tcp\n"
            "  timeout connect 2s\n"
            "  timeout client 120s\n"
            "  timeout server 120s\n"
            "frontend amqp\n"
            f"  bind 127.0.0.1:{self.port}\n"
            "  default_backend gateways\n"
            "backend gateways\n"
            "  balance roundrobin\n"
            "  option httpchk GET /readyz\n"
            "  http-check expect status 200\n"
            "  default-server inter 300ms fall 2 rise 2\n"
            f"{servers}\n"
        )
        self.log = directory / "haproxy.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [binary, "-db", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT
            )

    def server_states(self) -> dict[str, str]:
        """``show stat``'s status column (UP, DOWN, ...) of each backend server; empty while
        HAProxy is starting."""
        return {name: row["status"] for name, row in self.server_stats().items()}

    def server_stats(self) -> dict[str, dict[str, str]]:
        """``show stat``'s row of each backend server (status, scur: current sessions...)."""
        if self.process.poll() is not None:
            raise AssertionError(f"haproxy exited:\n{self.log.read_text()[-3000:]}")
        with socket.socket(socket.AF_UNIX) as sock:
            try:
                sock.connect(str(self.stats))
            except (FileNotFoundError, ConnectionRefusedError):
                return {}
            sock.sendall(b"show stat\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        lines = data.decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        rows: dict[str, dict[str, str]] = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(","), strict=False))
            if row.get("pxname") == "gateways" and row.get("svname") not in ("BACKEND", None):
                rows[row["svname"]] = row
        return rows

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        self._socket_dir.cleanup()


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(host="127.0.0.1", port=port, connection_attempts=1)
    )


class Publisher(threading.Thread):
    """Publishes ``bodies`` with confirms; a message counts once its Confirm.Ack came. After a
    lost connection it reconnects (through the balancer) and publishes again what was not
    confirmed: at least once, as a RabbitMQ application does."""

    def __init__(self, port: int, bodies: list[bytes]) -> None:
        super().__init__(name="publisher", daemon=True)
        self.port = port
        self.bodies = bodies
        self.confirmed: list[bytes] = []
        self.reconnects = 0
        self.error: BaseException | None = None
        self.halfway = threading.Event()

    def run(self) -> None:
        try:
            pending = list(self.bodies)
            deadline = time.monotonic() + RUN_TIMEOUT
            while pending and time.monotonic() < deadline:
                try:
                    with contextlib.closing(connect(self.port)) as connection:
                        channel = connection.channel()
                        channel.confirm_delivery()
                        while pending:
                            body = pending[0]
                            channel.basic_publish(
                                "", QUEUE, body, pika.BasicProperties(delivery_mode=2)
                            )
                            self.confirmed.append(body)  # basic_publish returned: acked
                            pending.pop(0)
                            if len(self.confirmed) >= len(self.bodies) // 2:
                                self.halfway.set()
                except CONNECTION_LOST:
                    self.reconnects += 1
        except BaseException as error:
            self.error = error
        finally:
            self.halfway.set()


class ConsumerLoop(threading.Thread):
    """Consumes QUEUE through the balancer, acking each message; reconnects when its replica
    goes away."""

    def __init__(self, name: str, port: int) -> None:
        super().__init__(name=name, daemon=True)
        self.port = port
        self.received: set[bytes] = set()
        self.reconnects = 0
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    with contextlib.closing(connect(self.port)) as connection:
                        channel = connection.channel()
                        channel.basic_qos(prefetch_count=20)

                        def on_message(ch: Any, method: Any, _: Any, body: bytes) -> None:
                            with self._lock:
                                self.received.add(body)
                            ch.basic_ack(method.delivery_tag)

                        channel.basic_consume(QUEUE, on_message)
                        while not self._stopping.is_set():
                            connection.process_data_events(time_limit=0.1)
                except CONNECTION_LOST:
                    self.reconnects += 1
        except BaseException as error:
            self.error = error

    def bodies(self) -> set[bytes]:
        with self._lock:
            return set(self.received)

    def stop(self) -> None:
        self._stopping.set()
        self.join(30)


@pytest.fixture
def stack_namespace(pulsar_stack: Any) -> Iterator[tuple[str, str]]:
    """A Pulsar namespace ``public/<name>`` and a ZooKeeper chroot of this test's own: the
    replicas' metadata lives in the chroot and goes with it (a killed replica's ephemeral
    records included, which a per-namespace cleanup would trip over)."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    chroot = f"/chart-fleet-{name}"
    with (
        kazoo_client(pulsar_stack.zookeeper) as zookeeper,
        httpx.Client(base_url=pulsar_stack.web_url, timeout=30) as admin,
    ):
        zookeeper.ensure_path(chroot)
        admin.put(f"/admin/v2/namespaces/public/{name}").raise_for_status()
        try:
            yield name, pulsar_stack.zookeeper + chroot
        finally:
            admin.delete(f"/admin/v2/namespaces/public/{name}", params={"force": "true"})
            zookeeper.delete(chroot, recursive=True)


@pytest.fixture
def chart_conf(
    helm: Helm, pulsar_stack: Any, stack_namespace: tuple[str, str], tmp_path: Path
) -> Path:
    """gateway.conf as the chart renders it for this stack, with PROXY v2 required from
    loopback (where HAProxy connects from) and a short ZooKeeper session, so that the killed
    replica's ephemeral records go within seconds."""
    namespace, zookeeper = stack_namespace
    rendered = helm.template(
        "--set", "pulsar.releaseName=",
        "--set", f"config.brokerServiceURL={pulsar_stack.broker_url}",
        "--set", f"config.brokerWebServiceURL={pulsar_stack.web_url}",
        "--set", f"config.configurationStoreServers={zookeeper}",
        "--set", f"config.amqpDefaultNamespace={namespace}",
        "--set", "config.zooKeeperSessionTimeoutMs=4000",
        "--set", "proxyProtocol.enabled=true,proxyProtocol.trustedNetworks={127.0.0.0/8}",
        # The chart authenticates by default; these clients log in as guest, so the fleet is
        # open, on purpose (both keys: docs/helm.md, "Authentication").
        "--set", "config.authenticationEnabled=false,config.amqpAllowUnauthenticatedRemote=true",
    )  # fmt: skip
    conf = tmp_path / "gateway.conf"
    conf.write_text(gateway_conf(rendered))
    return conf


def test_three_replicas_behind_haproxy_lose_no_confirmed_message(
    chart_conf: Path, tmp_path: Path
) -> None:
    conf_text = chart_conf.read_text()
    assert "amqpProxyProtocolTrustedNetworks=127.0.0.0/8" in conf_text.splitlines()
    replicas = [
        Replica(f"replica-{i}", free_port(), free_port(), tmp_path / f"replica-{i}.log")
        for i in range(1, REPLICAS + 1)
    ]
    with contextlib.ExitStack() as cleanup:
        # Undone in reverse order, each even if another fails: nothing is left running.
        for replica in replicas:
            cleanup.callback(replica.stop)
        for replica in replicas:
            replica.start(chart_conf)
        wait_until(
            lambda: all(r.ready() for r in replicas), timeout=START_TIMEOUT, what="/readyz 200"
        )
        lb = HAProxy(tmp_path, replicas)
        cleanup.callback(lb.stop)
        wait_until(
            lambda: list(lb.server_states().values()) == ["UP"] * REPLICAS,
            timeout=30,
            what="HAProxy's /readyz checks to mark every replica UP",
        )

        with contextlib.closing(connect(lb.port)) as setup:
            setup.channel().queue_declare(QUEUE, durable=True)

        consumers = [ConsumerLoop(f"consumer-{i}", lb.port) for i in range(3)]
        for consumer in consumers:
            consumer.start()
            cleanup.callback(consumer.stop)
        publisher = Publisher(lb.port, [f"message-{i}".encode() for i in range(MESSAGES)])
        publisher.start()

        assert publisher.halfway.wait(RUN_TIMEOUT), "the publisher never got halfway"
        # The replica with the most client connections right now: the kill must cut some.
        sessions = {name: int(row["scur"]) for name, row in lb.server_stats().items()}
        victim = next(r for r in replicas if r.name == max(sessions, key=sessions.__getitem__))
        assert victim.process is not None and sessions[victim.name] > 0, sessions
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait(30)
        wait_until(
            lambda: lb.server_states().get(victim.name) == "DOWN",
            timeout=30,
            what=f"HAProxy's health check to mark {victim.name} DOWN",
        )

        publisher.join(RUN_TIMEOUT)
        assert not publisher.is_alive(), "the publisher did not finish"
        assert publisher.error is None, repr(publisher.error)
        assert len(publisher.confirmed) == MESSAGES

        def everything_received() -> bool:
            received: set[bytes] = set()
            for consumer in consumers:
                assert consumer.error is None, repr(consumer.error)
                received |= consumer.bodies()
            return set(publisher.confirmed) <= received

        wait_until(everything_received, timeout=RUN_TIMEOUT, what="every confirmed message")
        reconnects = publisher.reconnects + sum(consumer.reconnects for consumer in consumers)
        # Each client the kill cut off came back through the balancer (at least once).
        assert reconnects >= sessions[victim.name], (reconnects, sessions)
        states = lb.server_states()
        assert states[victim.name] == "DOWN"
        assert [states[r.name] for r in replicas if r is not victim] == ["UP", "UP"]
