"""Real gateway processes on one namespace (a fleet of replicas), and which of them leads it.

The fleet tests' replicas, and those of the tests that need a whole fleet (observability,
management, rollup): each a ``python -m gateway.cli`` process (gateway_process.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pika
import trio

from gateway.backend.pulsar.delivery_records import decode_record
from gateway.metadata.paths import Layout
from gateway.metadata.zookeeper import ZooKeeperMetadataStore
from tests.support.clients import connect
from tests.support.fleet_clients import wait_subscription_consumers, wait_until
from tests.support.gateway_process import GatewayProcess, free_port, write_config
from tests.support.zookeeper import kazoo_client

# A short ZooKeeper session, so that a killed replica's ephemeral records go within seconds
# (zooKeeperSessionTimeoutMs of the fleets that kill replicas).
SESSION_TIMEOUT_MS = 4000
# Session expiry, then the leader's grace (its session timeout) and reaper ticks, with room
# for a loaded machine.
REAPED_WITHIN = 60.0


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


def leader_of(fleet: Fleet) -> str | None:
    async def ask() -> str | None:
        async with ZooKeeperMetadataStore(fleet.zookeeper) as store:
            return await store.leader_of(f"public/{fleet.namespace}")

    return trio.run(ask)


def process_of(replicas: list[GatewayProcess], replica_id: str | None) -> GatewayProcess | None:
    """The replica whose store has ``replica_id`` (``<host>-<pid>-<random>``)."""
    match = re.fullmatch(r".*-(\d+)-[0-9a-f]+", replica_id or "")
    pid = int(match.group(1)) if match else -1
    return next((replica for replica in replicas if replica.pid == pid), None)


def two_replicas_and_their_leader(
    fleet: Fleet,
) -> tuple[
    list[GatewayProcess], dict[str, pika.BlockingConnection], GatewayProcess, GatewayProcess
]:
    """Two replicas, a connection to each (both stand), which of them leads the namespace,
    and the other (the survivor of the leader's death)."""
    replicas = fleet.replicas(2)
    connections = {replica.name: connect(replica.port) for replica in replicas}
    wait_until(
        lambda: process_of(replicas, leader_of(fleet)) is not None,
        timeout=30,
        what="a leader among the replicas",
    )
    leader = process_of(replicas, leader_of(fleet))
    assert leader is not None
    [survivor] = [replica for replica in replicas if replica is not leader]
    return replicas, connections, leader, survivor
