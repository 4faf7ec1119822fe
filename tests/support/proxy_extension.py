"""The proxy extension (extension_shim/) in a real Pulsar proxy: the proxy process, its log
and what the log says, and clients through it (docs/proxy-extension.md)."""

from __future__ import annotations

import importlib.util
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pika

REPO = Path(__file__).resolve().parents[2]
GATEWAY_COMMAND = str(Path(sys.executable).parent / "starlight-rabbitmq")
START_TIMEOUT = 180.0  # a cold proxy JVM on two busy cores, then the gateway's start
STOP_TIMEOUT = 60.0


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
            return int(self.process.wait(STOP_TIMEOUT))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the proxy did not stop on SIGTERM:\n{self.tail()}") from None


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
