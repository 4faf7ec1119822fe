"""Issue 17 item 3: one replica of two is cut off from Pulsar and ZooKeeper, then healed.

The broker is a standalone of the test's own (tests/faults/own_stack.py) that advertises
``127.0.0.5``: after a lookup every gateway connects there, to a proxy on the broker's port
that forwards to the broker on 127.0.0.1 (tests/faults/proxies.py). The partition drops and
refuses the connections of the ``isolated`` replica's process only (the proxy knows them by
their ports, from /proc), and cuts the proxies through which that replica alone reaches
ZooKeeper (the shared one) and Pulsar's admin API. ``steady`` reaches everything directly.
Publishers with confirms and consumers with acks run on both replicas, on one queue."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.faults.gateway_process import LimitedGatewayProcess, wait_until
from tests.faults.outages import Consumer, Publisher
from tests.faults.own_stack import OwnStack, SplitEndpoints, new_stack
from tests.faults.proxies import ProxyThread
from tests.integration.fleet.processes import free_port, write_config
from tests.support.clients import connect, unique
from tests.support.pulsar_gateway import fresh_namespace

pytestmark = pytest.mark.integration

ADVERTISED = "127.0.0.5"  # on Linux the whole of 127.0.0.0/8 is loopback
SESSION_TIMEOUT_MS = 4000
STALLED = 3.0  # seconds the isolated replica's publisher goes without a confirm, at least
REPLY_CODE = re.compile(r"^\d{3} ")


@dataclass
class Partition:
    steady: LimitedGatewayProcess
    isolated: LimitedGatewayProcess
    broker: ProxyThread  # the advertised address: every replica's data connections
    cuts: tuple[ProxyThread, ...]  # the isolated replica's ZooKeeper and admin API
    namespace: str

    def start(self) -> None:
        self.broker.isolate(lambda port: port in self.isolated.local_ports())
        for proxy in self.cuts:
            proxy.cut()

    def heal(self) -> None:
        self.broker.restore()
        for proxy in self.cuts:
            proxy.restore()


def _address(url: str) -> tuple[str, int]:
    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    return host, int(port)


@pytest.fixture
def partition(tmp_path: Path, pulsar_stack: Any) -> Iterator[Partition]:
    own: OwnStack = new_stack(tmp_path / "pulsar", advertised_address=ADVERTISED)
    web = _address(own.web_url)
    with ExitStack() as stack:
        # The advertised addresses answer before the broker starts: it connects to itself there.
        broker = stack.enter_context(
            ProxyThread("127.0.0.1", own.broker_port, listen=(ADVERTISED, own.broker_port))
        )
        stack.enter_context(ProxyThread(*web, listen=(ADVERTISED, web[1])))
        own.up()
        stack.callback(own.down)
        zookeeper = stack.enter_context(ProxyThread(*_address(pulsar_stack.zookeeper)))
        admin = stack.enter_context(ProxyThread(*web))
        endpoints = SplitEndpoints(own.broker_url, own.web_url, pulsar_stack.zookeeper)
        namespace = stack.enter_context(fresh_namespace(endpoints))

        def start(name: str, *, broker_url: str, web_url: str, zookeeper: str) -> Any:
            port = free_port()
            config = write_config(
                tmp_path,
                port=port,
                namespace=namespace,
                zookeeper=zookeeper,
                web_url=web_url,
                broker_url=broker_url,
                extra=f"zooKeeperSessionTimeoutMs={SESSION_TIMEOUT_MS}\n",
            )
            process = LimitedGatewayProcess(name, config, port)
            stack.callback(process.close)
            process.start().wait_ready()
            # A replica opens a vhost at its first connection (and stands for its leader).
            connect(port).close()
            return process

        # The isolated replica opens the namespace first: it leads until the partition.
        isolated = start(
            "isolated",
            broker_url=f"pulsar://{ADVERTISED}:{own.broker_port}",
            web_url=f"http://127.0.0.1:{admin.port}",
            zookeeper=f"127.0.0.1:{zookeeper.port}",
        )
        isolated.wait_for(f"now leads namespace public/{namespace}")
        steady = start(
            "steady",
            broker_url=own.broker_url,
            web_url=own.web_url,
            zookeeper=pulsar_stack.zookeeper,
        )
        yield Partition(steady, isolated, broker, (zookeeper, admin), namespace)


def test_a_partitioned_replica(partition: Partition) -> None:
    steady, isolated = partition.steady, partition.isolated
    queue = unique("work")
    connect(steady.port).channel().queue_declare(queue, durable=True)
    clients = [
        Publisher(steady.port, queue, name="steady publisher"),
        Publisher(isolated.port, queue, first=1_000_000, name="isolated publisher"),
        Consumer(steady.port, queue, name="steady consumer"),
        Consumer(isolated.port, queue, name="isolated consumer"),
    ]
    on_steady, on_isolated, consuming_steady, consuming_isolated = clients
    assert isinstance(on_steady, Publisher) and isinstance(on_isolated, Publisher)
    assert isinstance(consuming_steady, Consumer) and isinstance(consuming_isolated, Consumer)

    def delivered() -> set[int]:
        return set(consuming_steady.received) | set(consuming_isolated.received)

    for client in clients:
        client.start()
    try:
        for publisher in (on_steady, on_isolated):
            wait_until(lambda p=publisher: len(p.confirmed) >= 100, timeout=60, what="confirms")
        wait_until(lambda: len(delivered()) >= 100, timeout=60, what="deliveries")
        # Both replicas' connections to the broker go through the advertised address's proxy.
        assert partition.broker.connections >= 2, partition.broker.connections

        lines = len(steady.output())
        partition.start()
        # The rest of the fleet is unaffected: the other replica takes the lead, and its
        # clients publish and consume on.
        steady.wait_for(
            f"now leads namespace public/{partition.namespace}", start=lines, timeout=60
        )
        confirmed, received = len(on_steady.confirmed), len(consuming_steady.received)
        wait_until(
            lambda: len(on_steady.confirmed) >= confirmed + 100,
            timeout=60,
            what="100 confirms on the steady replica during the partition",
        )
        wait_until(
            lambda: len(consuming_steady.received) >= received + 100,
            timeout=60,
            what="100 deliveries on the steady replica during the partition",
        )
        # The isolated replica confirms nothing it cannot store, and stays up.
        wait_until(
            lambda: on_isolated.stalled_for() >= STALLED,
            timeout=60,
            what=f"the isolated replica's publisher without a confirm for {STALLED} s",
        )
        assert isolated.alive()

        healed = time.monotonic()
        partition.heal()
        wait_until(
            lambda: on_isolated.first_confirm_after(healed) is not None,
            timeout=120,
            what="a confirm on the isolated replica after the partition",
        )
        on_steady.stop()
        on_isolated.stop()
        wait_until(
            lambda: set(on_steady.confirmed) | set(on_isolated.confirmed) <= delivered(),
            timeout=120,
            what="every confirmed message delivered",
        )
        consuming_steady.stop()
        consuming_isolated.stop()
    finally:
        for client in clients:
            client.stopping.set()
    first = on_isolated.first_confirm_after(healed)
    assert first is not None
    print(
        f"steady: {len(on_steady.confirmed)} confirmed; isolated: {len(on_isolated.confirmed)} "
        f"confirmed, {len(on_isolated.nacked)} nacked, closes {on_isolated.log.closes}; "
        f"consumers: {len(consuming_steady.received)} + {len(consuming_isolated.received)}, "
        f"closes {consuming_isolated.log.closes}; first confirm after healing "
        f"{first - healed:.2f} s"
    )
    for client in clients:
        assert all(REPLY_CODE.match(close) for close in client.log.closes), client.log.closes
    assert not on_steady.log.closes and not consuming_steady.log.closes
