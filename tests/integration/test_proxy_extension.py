"""The gateway as a Pulsar proxy extension: a real Pulsar proxy (ProxyServiceStarter) loads the
NAR built by Maven from extension_shim/, which supervises the Python gateway and relays AMQP
connections to it over a Unix socket with a PROXY v2 header. Real clients (pika), real Pulsar.

The proxies run on free ports against the session's local stack; each waits on conditions (log
lines, ports) with deadlines and is stopped with SIGTERM afterwards.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pulsar
import pytest

from gateway.model.naming import encode_local_name
from tests.support.clients import get_bodies, unique
from tests.support.proxy_extension import (
    REPO,
    START_TIMEOUT,
    STOP_TIMEOUT,
    RunningProxy,
    connect,
    pulsar_proxy,
    wait_until,
)
from tests.support.pulsar_gateway import fresh_namespace

pytestmark = pytest.mark.integration


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose (its parent has not reaped it yet).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@pytest.fixture(scope="module")
def nar() -> Path:
    """The NAR, built by Maven unless `make shim` built it from the current sources (Surefire
    runs there; not twice here)."""
    return Path(pulsar_proxy.fresh_nar())


@pytest.fixture(scope="module")
def namespace(pulsar_stack: Any) -> Iterator[str]:
    with fresh_namespace(pulsar_stack) as name:
        yield name


@pytest.fixture(scope="module")
def proxy(
    nar: Path, pulsar_stack: Any, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    # A gateway key in proxy.conf reaches the gateway: vhost / is this module's namespace.
    running = RunningProxy(
        tmp_path_factory.mktemp("proxy"), pulsar_stack, {"amqpDefaultNamespace": namespace}
    )
    try:
        running.wait_ready()
        yield running
    finally:
        running.stop()


def test_publish_with_confirms_and_consume_through_the_extension(
    proxy: RunningProxy, pulsar_stack: Any, namespace: str
) -> None:
    connection = connect(proxy.amqp_port)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        queue = unique("relay")
        channel.queue_declare(queue, durable=True)
        bodies = [f"message {n}".encode() for n in range(50)]
        for body in bodies:
            # With confirms on, basic_publish returns once the gateway acked (after Pulsar did).
            channel.basic_publish("", queue, body, mandatory=True)

        # The confirmed messages are in Pulsar: a native reader of the default exchange's
        # topic for this routing key finds every one.
        topic = f"persistent://public/{namespace}/{encode_local_name('', queue)}"
        client = pulsar.Client(pulsar_stack.broker_url)
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            in_pulsar = [reader.read_next(timeout_millis=10_000).data() for _ in bodies]
        finally:
            client.close()
        assert in_pulsar == bodies

        received: list[bytes] = []

        def on_message(ch: Any, method: Any, _props: Any, body: bytes) -> None:
            received.append(body)
            ch.basic_ack(method.delivery_tag)

        channel.basic_qos(prefetch_count=20)
        channel.basic_consume(queue, on_message)
        deadline = time.monotonic() + 30
        while len(received) < len(bodies) and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)
        assert sorted(received) == sorted(bodies)
        channel.queue_delete(queue)
    finally:
        connection.close()


def test_the_reference_smoke_script_passes(proxy: RunningProxy) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "smoke_pika.py"), str(proxy.amqp_port)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "created test-queue queue",
        "published message test",
        "received message: test",
        "deleted test-queue queue",
    ]


def test_the_gateway_sees_the_real_client_address(proxy: RunningProxy) -> None:
    connection = connect(proxy.amqp_port)
    try:
        sock = connection._impl._transport._sock  # pika's socket: its port names this client
        client = "{}:{}".format(*sock.getsockname()[:2])
        line = f"connection opened peer={client} "
        wait_until(lambda: line in proxy.text(), f"{line!r} in the proxy's log", 20)
    finally:
        connection.close()
    # ... not the relay's end of the Unix socket.
    assert "connection opened peer=unix:" not in proxy.text()


def test_a_killed_gateway_is_restarted_and_nothing_confirmed_is_lost(
    proxy: RunningProxy,
) -> None:
    queue = unique("survivor")
    connection = connect(proxy.amqp_port)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare(queue, durable=True)
    confirmed = [f"before {n}".encode() for n in range(20)]
    for body in confirmed:
        channel.basic_publish("", queue, body)
    starts = len(proxy.gateway_pids())
    victim = proxy.gateway_pids()[-1]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: not alive(victim), "the gateway to die", 20)
    # The client notices: its connection is gone.
    with pytest.raises(pika.exceptions.AMQPError):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.2)
    proxy.wait_ready(gateways=starts + 1)
    replacement = proxy.gateway_pids()[-1]
    assert replacement != victim and alive(replacement)

    # A client that reconnects finds every confirmed message.
    connection = connect(proxy.amqp_port, attempts=20)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("", queue, b"after")
        got = get_bodies(channel, queue, len(confirmed) + 1, timeout=30)
        assert sorted(got) == sorted([*confirmed, b"after"])
        channel.queue_delete(queue)
    finally:
        connection.close()


def test_sigterm_stops_the_proxy_and_leaves_no_gateway_behind(
    nar: Path, pulsar_stack: Any, namespace: str, tmp_path: Path
) -> None:
    running = RunningProxy(tmp_path, pulsar_stack, {"amqpDefaultNamespace": namespace})
    try:
        running.wait_ready()
        [gateway] = running.gateway_pids()
        assert alive(gateway)
    finally:
        running.stop()
    wait_until(lambda: not alive(gateway), f"gateway pid {gateway} to be gone", 10)
    text = running.text()
    assert f"stopping the gateway (pid {gateway})" in text
    # Its private directory (config with secrets, socket) went with it.
    work = re.search(r"gateway configuration (\S+)/gateway\.conf", text)
    assert work is not None and not Path(work.group(1)).exists()


def test_sigkill_of_the_proxy_still_stops_the_gateway(
    nar: Path, pulsar_stack: Any, namespace: str, tmp_path: Path
) -> None:
    """No shutdown hook runs on SIGKILL: the gateway notices its standard input (a pipe from
    the JVM) closing, and stops by itself."""
    running = RunningProxy(tmp_path, pulsar_stack, {"amqpDefaultNamespace": namespace})
    try:
        running.wait_ready()
        [gateway] = running.gateway_pids()
    finally:
        running.process.kill()
        running.process.wait(STOP_TIMEOUT)
    wait_until(lambda: not alive(gateway), f"gateway pid {gateway} to stop by itself", 30)
    # No JVM code ran to remove the private directory: the test does (docs/proxy-extension.md).
    work = re.search(r"gateway configuration (\S+)/gateway\.conf", running.text())
    assert work is not None
    shutil.rmtree(work.group(1), ignore_errors=True)


def test_direct_mode_lets_the_gateway_bind_the_port(
    nar: Path, pulsar_stack: Any, namespace: str, tmp_path: Path
) -> None:
    running = RunningProxy(
        tmp_path, pulsar_stack, {"amqpDefaultNamespace": namespace, "amqpProxyMode": "direct"}
    )
    try:
        running.wait_ready()
        assert "gateway.server: listening on amqp://127.0.0.1:" in running.text()
        result = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "smoke_pika.py"), str(running.amqp_port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        running.stop()


def _port_in_use() -> Iterator[tuple[dict[str, str], str]]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        yield (
            {"amqpListeners": f"amqp://127.0.0.1:{port}"},
            f"amqpListeners: cannot listen on amqp://127.0.0.1:{port}: Address already in use",
        )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param(
            {"amqpGatewayCommand": "/nonexistent/starlight-rabbitmq"},
            "amqpGatewayCommand: '/nonexistent/starlight-rabbitmq' does not exist or is not "
            "executable",
            id="missing-command",
        ),
        pytest.param(
            {"amqpGatewayCommand": "no-such-gateway-command"},
            "amqpGatewayCommand: 'no-such-gateway-command' is not on the proxy's PATH",
            id="command-not-on-path",
        ),
        pytest.param(
            {"amqpListeners": "http://127.0.0.1:5672"},
            "amqpListeners: listener 'http://127.0.0.1:5672' is not of the form "
            "amqp[s]://<host>:<port>",
            id="bad-listener-url",
        ),
        pytest.param(
            {"amqpHeartbeatDelay": "soon"},
            "amqpHeartbeatDelay: must be an integer",
            id="gateway-refuses-a-value",
        ),
        pytest.param(None, None, id="port-in-use"),
    ],
)
def test_bad_configuration_is_one_clear_line_and_the_proxy_exits(
    nar: Path,
    pulsar_stack: Any,
    tmp_path: Path,
    extra: dict[str, str] | None,
    message: str | None,
) -> None:
    holder = _port_in_use() if extra is None else None
    if holder is not None:
        extra, message = next(holder)
    assert extra is not None and message is not None
    running = RunningProxy(tmp_path, pulsar_stack, extra)
    try:
        code = running.process.wait(START_TIMEOUT)  # it exits: no hang
    finally:
        if running.process.poll() is None:
            running.stop()
        if holder is not None:
            holder.close()
    assert code != 0
    lines = [
        line
        for line in running.text().splitlines()
        if "Starlight for RabbitMQ cannot start:" in line and " ERROR " in line
    ]
    assert len(lines) == 1, running.tail()
    assert message in lines[0], lines[0]
    assert not any(alive(pid) for pid in running.gateway_pids())
