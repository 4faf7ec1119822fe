"""Real gateway processes with the management API on, for the tests of docs/management.md.

Each module gets its own Pulsar namespace (the vhost ``/`` of its gateways) and its own
ZooKeeper chroot: the management API lists every vhost and every connection of a fleet, and
the shared stack's ZooKeeper serves other test runs, whose vhosts and replicas would otherwise
show up here (and ours there).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.fleet.conftest import Fleet
from tests.integration.fleet.processes import GatewayProcess, free_port
from tests.support.pulsar_gateway import fresh_namespace
from tests.support.zookeeper import kazoo_client

AUTH = ("guest", "guest")


class Managed:
    """A gateway process and its management API's base URL."""

    def __init__(self, process: GatewayProcess, management_port: int, scheme: str = "http") -> None:
        self.process = process
        self.port = process.port  # AMQP
        host = "localhost" if scheme == "https" else "127.0.0.1"  # the test certificate's name
        self.url = f"{scheme}://{host}:{management_port}"

    def client(self, auth: tuple[str, str] | None = AUTH) -> httpx.Client:
        return httpx.Client(base_url=self.url, auth=auth, timeout=30)


class ManagedFleet:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    @property
    def namespace(self) -> str:
        return self.fleet.namespace

    def start(self, name: str, extra: str = "", *, scheme: str = "http") -> Managed:
        port = free_port()
        process = self.fleet.start(
            name, extra=f"managementListener={scheme}://127.0.0.1:{port}\n" + extra
        )
        process.wait_ready()
        process.wait_for(r"gateway\.management: management API on")
        return Managed(process, port, scheme)


@contextlib.contextmanager
def managed_fleet(tmp: Path, stack: Any, extra: str = "") -> Iterator[ManagedFleet]:
    chroot = f"/management-test-{uuid.uuid4().hex[:12]}"
    with kazoo_client(stack.zookeeper) as client:
        client.ensure_path(chroot)
        try:
            with fresh_namespace(stack) as namespace:
                fleet = Fleet(
                    tmp, stack, namespace, zookeeper=stack.zookeeper + chroot, extra_config=extra
                )
                try:
                    yield ManagedFleet(fleet)
                finally:
                    _stop(fleet)
        finally:
            client.delete(chroot, recursive=True)


def _stop(fleet: Fleet) -> None:
    """SIGTERM first (their ZooKeeper sessions close with them), then whatever is left."""
    running = [p for p in fleet.processes if p.process is not None and p.process.poll() is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            process.signal(signal.SIGTERM)
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait_exit(60)
    fleet.close()


@pytest.fixture(scope="module")
def management(
    tmp_path_factory: pytest.TempPathFactory, pulsar_stack: Any
) -> Iterator[ManagedFleet]:
    """A fleet of the module's own (authentication off: every user is an administrator)."""
    with managed_fleet(tmp_path_factory.mktemp("management"), pulsar_stack) as fleet:
        yield fleet


@pytest.fixture(scope="module")
def gateway(management: ManagedFleet) -> Managed:
    """One replica of it, with its management API."""
    return management.start("replica-1")
