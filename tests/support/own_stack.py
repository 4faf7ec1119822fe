"""A Pulsar standalone of a test's (or a benchmark's) own, on free ports: one that a test may
stop and start again, or one with a broker setting the shared stack does not have. The shared
stack (6650/8080/2181) serves every other test running at the same time and must never go down
or be reconfigured. It is scripts/stack.py's standalone with a profile made at run time (its
state in a temporary folder, the classpath the shared stack already resolved).

Users: the fault tests (tests/faults/), the settlement tests on a broker that keeps
batch-index acknowledgements (tests/integration/clients/conftest.py) and benchmarks
(bench/faults.py, bench/bench_gateway_vs_pulsar.py ``--batch-index-acks``)."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.stack_script import load_stack_module

# As the secured profile's: the C1 compiler only halves the JVM's start (scripts/stack.py).
# A benchmark passes the default profile's instead (peak throughput needs C2).
JVM_OPTIONS = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:MaxDirectMemorySize=256m",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:TieredStopAtLevel=1",
)


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free right now (held open together so none repeats)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class OwnStack:
    """A standalone Pulsar (broker, bookie, ZooKeeper in one JVM) the test controls."""

    profile: Any  # scripts/stack.py's Profile

    @property
    def broker_port(self) -> int:
        return int(self.profile.broker_port)

    @property
    def broker_url(self) -> str:
        return str(self.profile.broker_url)

    @property
    def web_url(self) -> str:
        return str(self.profile.web_url)

    @property
    def zookeeper(self) -> str:
        return str(self.profile.zookeeper)

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs (a benchmark counts its CPU time)."""
        record = load_stack_module()._read_record(self.profile.state_dir())
        return None if record is None else int(record.pid)

    def up(self) -> None:
        """Start it (again, on its data) and wait until it is healthy."""
        load_stack_module().ensure_up(profile=self.profile)

    def down(self) -> None:
        """SIGTERM: the broker closes its topics, the bookie flushes, ZooKeeper stops."""
        load_stack_module().down(self.profile)

    def crash(self) -> None:
        """SIGKILL: nothing is closed or flushed by the JVM (the operating system keeps what
        it had written); ``up()`` finds the pid gone and starts it again on its data."""
        stack = load_stack_module()
        record = stack._read_record(self.profile.state_dir())
        assert record is not None, "the stack is not running"
        os.kill(record.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while stack._alive(record):
            assert time.monotonic() < deadline, f"pid {record.pid} survived SIGKILL for 30 s"
            time.sleep(0.05)  # polling interval of a condition with a deadline


def new_stack(
    directory: Path,
    *,
    advertised_address: str | None = None,
    broker_config: str = "",
    jvm_options: tuple[str, ...] = JVM_OPTIONS,
) -> OwnStack:
    """A standalone on free ports with its state in ``directory``, not started yet.
    ``advertised_address``: what the broker tells clients to connect to after a lookup (it
    still listens on 127.0.0.1), for a proxy listening there on the broker's port.
    ``broker_config``: lines appended to its standalone.conf (``key=value``, later keys win)."""
    stack = load_stack_module()
    broker, web, zookeeper, bookie = free_ports(4)
    extra = f"advertisedAddress={advertised_address}\n" if advertised_address else ""
    extra += broker_config
    profile = stack.Profile(
        f"own-{broker}",
        broker,
        web,
        zookeeper,
        bookie,
        tls=False,
        jvm_options=jvm_options,
        directory=directory,
        extra_config=extra,
    )
    return OwnStack(profile)


@contextmanager
def own_stack(
    directory: Path, *, broker_config: str = "", jvm_options: tuple[str, ...] = JVM_OPTIONS
) -> Iterator[OwnStack]:
    """A started standalone on free ports with its state in ``directory``, stopped after
    (``broker_config`` and ``jvm_options`` as for ``new_stack``)."""
    own = new_stack(directory, broker_config=broker_config, jvm_options=jvm_options)
    own.up()
    try:
        yield own
    finally:
        own.down()


@dataclass(frozen=True)
class SplitEndpoints:
    """Pulsar from one stack, the gateway's metadata from another's ZooKeeper (what
    ``tests.faults.gateway_process.gateway`` and ``fresh_namespace`` read)."""

    broker_url: str
    web_url: str
    zookeeper: str


def pulsar_of(broker: OwnStack, *, metadata: Any) -> SplitEndpoints:
    """``broker``'s Pulsar with ``metadata``'s ZooKeeper: stopping the broker leaves the
    gateway's metadata alone."""
    return SplitEndpoints(broker.broker_url, broker.web_url, metadata.zookeeper)
