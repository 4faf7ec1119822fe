"""A throw-away RabbitMQ node on loopback, for the benchmarks that compare against RabbitMQ.

    with local_rabbitmq() as node:      # starts epmd + rabbitmq-server, waits until it serves
        print(node.amqp_url)            # amqp://guest:guest@127.0.0.1:<port>
    # stopped, temp dir removed

Uses Debian's ``rabbitmq-server`` package (``apt-get install rabbitmq-server``; the package's own
service is never started or touched: Debian's policy-rc.d denies service starts in containers,
and on a machine with systemd ``systemctl disable --now rabbitmq-server`` leaves it off). The
node runs as the current user from ``/usr/lib/rabbitmq/bin/rabbitmq-server`` with everything
pointed into one temp dir: its own node name, AMQP port, Erlang distribution port, HOME (for the
Erlang cookie), Mnesia/log/config/plugin files, and its own ``epmd`` on a private port, started
in the foreground as our child so that it can be stopped by pid (a RabbitMQ-started epmd would
daemonize and outlive the node). Nothing listens beyond 127.0.0.1 / ::1.

``python3 bench/rabbitmq.py`` starts a node, prints its URL, and stops it on Enter or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from server_process import (  # bench/, next to this file
    free_port,
    log_tail,
    port_open,
    start_logged,
    stop,
    wait_ready,
)

SERVER_SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0


class RabbitMQUnavailable(RuntimeError):
    """rabbitmq-server is not installed or did not start; the message says why."""


@dataclass(frozen=True)
class RabbitNode:
    port: int
    pid: int
    log: Path

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}"


def version() -> str | None:
    """The installed rabbitmq-server package version (dpkg), or None."""
    if not SERVER_SCRIPT.exists():
        return None
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


def unavailable_reason() -> str | None:
    """Why a node cannot be started here, or None if it can be tried."""
    if not SERVER_SCRIPT.exists():
        return (
            f"{SERVER_SCRIPT} not found: install Debian's rabbitmq-server "
            "(apt-get install rabbitmq-server)"
        )
    if shutil.which("epmd") is None:
        return "epmd (Erlang) is not on PATH"
    return None


def _beam_pid(script_pid: int) -> int | None:
    """The Erlang VM (beam.smp) started by the rabbitmq-server script: the script itself when it
    exec'd, else its child."""
    candidates = [script_pid]
    with contextlib.suppress(OSError):
        children = Path(f"/proc/{script_pid}/task/{script_pid}/children").read_text().split()
        candidates += [int(child) for child in children]
    for pid in candidates:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip().startswith("beam"):
                return pid
    return None


@contextlib.contextmanager
def local_rabbitmq(port: int | None = None) -> Iterator[RabbitNode]:
    """Start a private RabbitMQ node on 127.0.0.1; stop it and remove its files on exit."""
    reason = unavailable_reason()
    if reason is not None:
        raise RabbitMQUnavailable(reason)
    base = Path(tempfile.mkdtemp(prefix="bench-rabbitmq-"))
    port = port or free_port()
    epmd_port, dist_port = free_port(), free_port()
    log = base / "server.log"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": str(base),  # the Erlang cookie goes here
        "ERL_EPMD_PORT": str(epmd_port),
        "ERL_EPMD_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODENAME": f"bench{port}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        "RABBITMQ_BASE": str(base),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_LOGS": "-",
        # Files that do not exist: no /etc/rabbitmq configuration, no plugins.
        "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
        "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
        "RABBITMQ_PID_FILE": str(base / "pid"),
    }
    epmd: subprocess.Popen[bytes] | None = None
    server: subprocess.Popen[bytes] | None = None
    try:
        epmd = subprocess.Popen(
            ["epmd", "-port", str(epmd_port), "-address", "127.0.0.1"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_ready(
            epmd,
            lambda: port_open(epmd_port),
            log=base / "no-epmd-log",
            what=f"epmd on port {epmd_port}",
            timeout=10,
            error=RabbitMQUnavailable,
        )
        server = start_logged([str(SERVER_SCRIPT)], log, cwd=base, env=env)
        wait_ready(
            server,
            lambda: b"Server startup complete" in log.read_bytes(),
            log=log,
            what="rabbitmq-server",
            timeout=START_TIMEOUT,
            error=RabbitMQUnavailable,
        )
        if not port_open(port):
            raise RabbitMQUnavailable(
                f"rabbitmq-server does not listen on {port}:\n{log_tail(log)}"
            )
        yield RabbitNode(port=port, pid=_beam_pid(server.pid) or server.pid, log=log)
    finally:
        if server is not None:
            # SIGTERM makes the Erlang VM run init:stop() (an orderly shutdown); the script
            # that started it then exits too.
            vm = _beam_pid(server.pid)
            if vm is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(vm, signal.SIGTERM)
            stop(server, signal.SIGTERM, STOP_TIMEOUT)
        if epmd is not None:
            stop(epmd, signal.SIGTERM, 5)
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    try:
        with local_rabbitmq() as node:
            print(f"RabbitMQ {version()} at {node.amqp_url} (log {node.log}); Enter stops it")
            with contextlib.suppress(KeyboardInterrupt, EOFError):
                input()
    except RabbitMQUnavailable as exc:
        print(f"cannot start RabbitMQ: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
