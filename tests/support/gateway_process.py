"""Real ``starlight-rabbitmq`` processes for the fleet tests: started as a user starts them,
their output collected line by line so that a test can wait for what they log."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "gateway.cli"]
START_TIMEOUT = 90.0
WORKER_STARTED = re.compile(r"worker (\d+) started \(pid (\d+)\)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(
    directory: Path,
    *,
    port: int,
    namespace: str,
    zookeeper: str,
    web_url: str,
    broker_url: str,
    extra: str = "",
) -> Path:
    """A configuration whose vhost ``/`` is ``public/<namespace>``, listening on ``port``
    (``extra``: more ``key=value`` lines)."""
    path = directory / f"gateway-{port}.conf"
    path.write_text(
        f"brokerServiceURL={broker_url}\n"
        f"brokerWebServiceURL={web_url}\n"
        f"configurationStoreServers={zookeeper}\n"
        f"amqpDefaultNamespace={namespace}\n"
        f"amqpListeners=amqp://127.0.0.1:{port}\n"
        # Several gateways on one host: the HTTP endpoint's fixed default port would collide.
        "metricsListener=http://127.0.0.1:0\n" + extra
    )
    return path


def write_stack_config(
    directory: Path, stack: Any, *, port: int, namespace: str, extra: str = ""
) -> Path:
    """``write_config`` for the local stack ``stack`` (its broker, web and ZooKeeper URLs)."""
    return write_config(
        directory,
        port=port,
        namespace=namespace,
        zookeeper=stack.zookeeper,
        web_url=stack.web_url,
        broker_url=stack.broker_url,
        extra=extra,
    )


def _is_our_worker(pid: int, config: Path) -> bool:
    """Whether ``pid`` is still a worker started with ``config`` (a pid of a worker that
    exited long ago may belong to another process by now)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"--worker-fd" in cmdline and str(config).encode() in cmdline


class GatewayProcess:
    """One ``python -m gateway.cli -c <config> [args]`` process and everything it printed."""

    def __init__(self, name: str, config: Path, port: int, args: tuple[str, ...] = ()) -> None:
        self.name = name
        self.config = config
        self.port = port
        self.args = args
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        # Runs in the child between fork and exec (e.g. to lower a resource limit).
        self.before_exec: Callable[[], None] | None = None

    # ------------------------------------------------------------------ life

    def start(self) -> GatewayProcess:
        self.process = subprocess.Popen(
            [*COMMAND, "-c", str(self.config), *self.args],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=self.before_exec,
        )
        self._reader = threading.Thread(target=self._read, name=f"{self.name}-log", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def worker_pids(self) -> set[int]:
        """Every worker pid a ``--workers`` supervisor reported starting."""
        return {int(m.group(2)) for line in self.output() if (m := WORKER_STARTED.search(line))}

    def wait_ready(self, timeout: float = START_TIMEOUT) -> GatewayProcess:
        """Until it listens (a single process) or every worker does (``--workers``)."""
        if "--workers" in self.args:
            self.wait_for(r"all \d+ workers ready", timeout=timeout)
        else:
            self.wait_for(r"gateway\.server: listening on", timeout=timeout)
        return self

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.process is not None
        code = self.process.wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        return code

    def close(self) -> None:
        """Leave nothing running: the process, and any worker it started."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        for pid in self.worker_pids:
            if _is_our_worker(pid, self.config):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.process.wait(30)
        if self._reader is not None:
            self._reader.join(30)

    # ------------------------------------------------------------------ output

    def output(self) -> list[str]:
        with self._changed:
            return list(self.lines)

    def matching(self, pattern: str, start: int = 0) -> list[re.Match[str]]:
        regex = re.compile(pattern)
        return [m for line in self.output()[start:] if (m := regex.search(line))]

    def wait_for(
        self, pattern: str, *, count: int = 1, start: int = 0, timeout: float = 30.0
    ) -> list[re.Match[str]]:
        """Wait until ``count`` lines (from line ``start`` on) match ``pattern``."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [m for line in self.lines[start:] if (m := regex.search(line))]
                if len(found) >= count:
                    return found
                code = self.process.poll() if self.process is not None else None
                exited = code is not None
                left = deadline - time.monotonic()
                if left <= 0 or (exited and not self._reader_alive()):
                    tail = "\n".join(self.lines[-40:])
                    state = f"exited with {code}" if exited else "running"
                    raise AssertionError(
                        f"{self.name} ({state}): {len(found)} of {count} lines matching "
                        f"{pattern!r} after {timeout} s; last lines:\n{tail}"
                    )
                self._changed.wait(min(left, 0.5))

    def _reader_alive(self) -> bool:
        return self._reader is not None and self._reader.is_alive()
