"""The ``starlight-rabbitmq`` command as a user runs it: a process of its own, on the local
stack's default addresses (scripts/stack.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "gateway.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(tmp_path: Path, extra: str = "", port: int | None = None) -> Path:
    """A config for the local stack's default addresses (see scripts/stack.py)."""
    path = tmp_path / "gateway.conf"
    path.write_text(
        "brokerServiceURL=pulsar://127.0.0.1:6650\n"
        "brokerWebServiceURL=http://127.0.0.1:8080\n"
        "configurationStoreServers=127.0.0.1:2181\n"
        f"amqpListeners=amqp://127.0.0.1:{port or free_port()}\n" + extra
    )
    return path


def run(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        COMMAND + args, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )


def wait_for_port(port: int, process: subprocess.Popen[str], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"gateway exited: {process.communicate()}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"port {port} never opened")
