"""Fixtures of the fleet tests: a fresh namespace, and real gateway processes on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.backend.pulsar.delivery_records import decode_record
from gateway.metadata.paths import Layout
from tests.integration.fleet.clients import wait_subscription_consumers
from tests.integration.fleet.processes import GatewayProcess, free_port, write_config
from tests.support.pulsar_gateway import fresh_namespace
from tests.support.zookeeper import kazoo_client


@pytest.fixture
def namespace(pulsar_stack: Any) -> Iterator[str]:
    """``public/<name>``'s short name, the vhost ``/`` of every gateway a test starts
    (fresh_namespace removes its metadata from ZooKeeper afterwards, so that later gateways
    do not find it)."""
    with fresh_namespace(pulsar_stack) as name:
        yield name


@pytest.fixture
def chroot(pulsar_stack: Any) -> Iterator[str]:
    """``configurationStoreServers`` for a ZooKeeper namespace of this test's own: replicas of
    other test runs on the shared ZooKeeper then neither lead nor touch this test's vhosts."""
    path = f"/fleet-test-{uuid.uuid4().hex[:12]}"
    with kazoo_client(pulsar_stack.zookeeper) as client:
        client.ensure_path(path)
        yield pulsar_stack.zookeeper + path
        client.delete(path, recursive=True)


class Fleet:
    """Starts gateway processes on one namespace; ``close()`` kills whatever is left."""

    def __init__(
        self,
        directory: Path,
        stack: Any,
        namespace: str,
        *,
        zookeeper: str | None = None,
        extra_config: str = "",
    ) -> None:
        self._directory = directory
        self._stack = stack
        self.namespace = namespace
        # The replicas' configurationStoreServers (the stack's, or a chroot of it).
        self.zookeeper: str = zookeeper or stack.zookeeper
        self._extra_config = extra_config
        self.processes: list[GatewayProcess] = []

    def start(
        self,
        name: str,
        *args: str,
        port: int | None = None,
        zookeeper: str | None = None,
        extra: str = "",
    ) -> GatewayProcess:
        """Start one (not waiting for it to be ready: start several, then wait); ``extra``:
        configuration lines of this one only."""
        port = port or free_port()
        config = write_config(
            self._directory,
            port=port,
            namespace=self.namespace,
            zookeeper=zookeeper or self.zookeeper,
            web_url=self._stack.web_url,
            broker_url=self._stack.broker_url,
            extra=self._extra_config + extra,
        )
        process = GatewayProcess(name, config, port, args)
        self.processes.append(process)
        return process.start()

    def replicas(self, count: int) -> list[GatewayProcess]:
        """``count`` single-process replicas, each on a port of its own, all ready."""
        started = [self.start(f"replica-{index + 1}") for index in range(count)]
        return [replica.wait_ready() for replica in started]

    def wait_consumers(self, binding: tuple[str, str | None], queue: str, count: int) -> None:
        """Until Pulsar sees ``count`` consumers of ``queue`` on ``binding``'s topic."""
        wait_subscription_consumers(self._stack.web_url, self.namespace, binding, queue, count)

    def recorded_deliveries(self) -> dict[str, int]:
        """Replica id -> how many deliveries its record in ZooKeeper holds (the fleet's
        memory of what each replica delivered and has not seen settled)."""
        folder = Layout().deliveries(f"public/{self.namespace}")
        with kazoo_client(self.zookeeper) as client:
            if not client.exists(folder):
                return {}
            return {
                child: len(decode_record(client.get(f"{folder}/{child}")[0]))
                for child in client.get_children(folder)
            }

    def close(self) -> None:
        for process in self.processes:
            process.close()


@pytest.fixture
def fleet(tmp_path: Path, pulsar_stack: Any, namespace: str) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path, pulsar_stack, namespace)
    try:
        yield fleet
    finally:
        fleet.close()
