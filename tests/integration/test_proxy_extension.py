"""The gateway as a Pulsar proxy extension: a real Pulsar proxy (ProxyServiceStarter) loads the
NAR built by Maven from extension_shim/, which supervises the Python gateway and relays AMQP
connections to it over a Unix socket with a PROXY v2 header. Real clients (pika), real Pulsar.

The proxies run on free ports against the session's local stack; each waits on conditions (log
lines, ports) with deadlines and is stopped with SIGTERM afterwards.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pika
import pika.exceptions
import pulsar
import pytest

from gateway.model.naming import encode_local_name
from tests.support.clients import get_bodies, unique
from tests.support.pulsar_gateway import fresh_namespace

REPO = Path(__file__).resolve().parents[2]
GATEWAY_COMMAND = str(Path(sys.executable).parent / "starlight-rabbitmq")
START_TIMEOUT = 180.0  # a cold proxy JVM on two busy cores, then the gateway's start
STOP_TIMEOUT = 60.0

pytestmark = pytest.mark.integration


def _load(name: str) -> ModuleType:
    # scripts/ is not a package; pulsar_proxy imports stack by path too.
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


pulsar_proxy = _load("pulsar_proxy")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], Any], what: Callable[[], str] | str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f} s: {what() if callable(what) else what}"
            )
        time.sleep(0.1)  # polling interval of a condition with a deadline
    return result


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


class RunningProxy:
    """One ProxyServiceStarter with the extension, its log, and what the log says."""

    def __init__(
        self,
        directory: Path,
        stack: Any,
        extra: dict[str, str],
        gateway_command: str | None = GATEWAY_COMMAND,  # None: no amqpGatewayCommand (sidecar)
    ) -> None:
        self.amqp_port = free_port()
        self.web_port = free_port()
        command = {} if gateway_command is None else {"amqpGatewayCommand": gateway_command}
        self.conf = pulsar_proxy.write_proxy_conf(
            directory,
            nar=pulsar_proxy.nar_path(),
            broker_url=stack.broker_url,
            web_url=stack.web_url,
            zookeeper=stack.zookeeper,
            service_port=free_port(),
            web_port=self.web_port,
            amqp_port=self.amqp_port,
            extra={**command, **extra},
        )
        self.relay = extra.get("amqpProxyMode", "relay") == "relay"
        self.log = directory / "proxy.log"
        self.process = pulsar_proxy.start_proxy(self.conf, self.log)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def gateway_pids(self) -> list[int]:
        return [int(pid) for pid in re.findall(r"started the gateway \(pid (\d+)\)", self.text())]

    def wait_ready(self, gateways: int = 1) -> None:
        def ready() -> bool:
            assert self.process.poll() is None, f"the proxy exited:\n{self.tail()}"
            text = self.text()
            return (
                # Relay mode: the proxy binds amqpListeners itself; direct: the gateway does.
                ("Successfully bound extension `rabbitmq`" in text or not self.relay)
                and len(re.findall(r"the gateway \(pid \d+\) is ready", text)) >= gateways
            )

        wait_until(ready, lambda: f"proxy with a ready gateway:\n{self.tail()}", START_TIMEOUT)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the proxy did not stop on SIGTERM:\n{self.tail()}") from None


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


def connect(port: int, attempts: int = 1) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            host="127.0.0.1",
            port=port,
            connection_attempts=attempts,
            retry_delay=0.5,
            socket_timeout=10,
            blocked_connection_timeout=30,
        )
    )


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
