"""Real gateway processes with the management API on (docs/management.md), and the
connections they list.

Each fleet gets its own Pulsar namespace (the vhost ``/`` of its gateways) and its own
ZooKeeper chroot: the management API lists every vhost and every connection of a fleet, and
the shared stack's ZooKeeper serves other test runs, whose vhosts and replicas would otherwise
show up (and ours there).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest

from tests.support.fleet import Fleet
from tests.support.gateway_process import GatewayProcess, free_port
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


# How long a replica may take to list a connection of the fleet (the directory writes a
# replica's records at most a second after a change).
LISTED_WITHIN = 15.0


def connect_named(replica: Managed, name: str) -> pika.BlockingConnection:
    parameters = pika.ConnectionParameters("127.0.0.1", replica.port, heartbeat=0)
    parameters.client_properties = {"connection_name": name}
    return pika.BlockingConnection(parameters)


def find_connection(replica: Managed, name: str) -> dict[str, Any]:
    """The connection whose client named itself ``name``, as ``replica`` lists it (waiting
    until it does, as amqp091-go's dropConnection retries)."""
    deadline = time.monotonic() + LISTED_WITHIN
    with replica.client() as api:
        while True:
            listed = api.get("/api/connections/").json()
            found = [c for c in listed if c["client_properties"].get("connection_name") == name]
            if found:
                connection: dict[str, Any] = found[0]
                return connection
            assert time.monotonic() < deadline, f"{name} not listed: {listed}"
            time.sleep(0.2)  # polling a listing, bounded by the deadline above


def closed_by_broker(connection: pika.BlockingConnection) -> tuple[int, str]:
    deadline = time.monotonic() + 15
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.2)
    return caught.value.reply_code, caught.value.reply_text
