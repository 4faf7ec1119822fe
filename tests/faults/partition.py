"""Issue 17 item 3, a partitioned replica: the fleet and the scenario, shared by
tests/faults/test_partitioned_replica.py and bench/faults.py.

The broker is a standalone of our own (tests/support/own_stack.py) that advertises
``127.0.0.5``: after a lookup every gateway connects there, to a proxy on the broker's port
that forwards to the broker on 127.0.0.1 (tests/faults/proxies.py). The partition drops and
refuses the connections of the ``isolated`` replica's process only (the proxy knows them by
their ports, from /proc), and cuts the proxies through which that replica alone reaches
ZooKeeper and Pulsar's admin API. ``steady`` reaches everything directly. The gateways keep
their metadata in that standalone's ZooKeeper too: no gateway of another test run can stand
for leader of the namespace and take the lead that must move to ``steady``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.faults.gateway_process import LimitedGatewayProcess, wait_until
from tests.faults.outages import Consumer, Publisher
from tests.faults.proxies import ProxyThread
from tests.support.clients import connect, unique
from tests.support.gateway_process import free_port, write_config
from tests.support.own_stack import OwnStack, new_stack
from tests.support.pulsar_gateway import fresh_namespace

ADVERTISED = "127.0.0.5"  # on Linux the whole of 127.0.0.0/8 is loopback
SESSION_TIMEOUT_MS = 4000


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


@contextmanager
def partitioned_fleet(directory: Path) -> Iterator[Partition]:
    """Two replicas on a fresh namespace of a standalone of our own, ``isolated`` leading it
    and ready to be partitioned off."""
    directory.mkdir(parents=True, exist_ok=True)
    own: OwnStack = new_stack(directory / "pulsar", advertised_address=ADVERTISED)
    web = _address(own.web_url)
    with ExitStack() as stack:
        # The advertised addresses answer before the broker starts: it connects to itself there.
        broker = stack.enter_context(
            ProxyThread("127.0.0.1", own.broker_port, listen=(ADVERTISED, own.broker_port))
        )
        stack.enter_context(ProxyThread(*web, listen=(ADVERTISED, web[1])))
        own.up()
        stack.callback(own.down)
        zookeeper = stack.enter_context(ProxyThread(*_address(own.zookeeper)))
        admin = stack.enter_context(ProxyThread(*web))
        namespace = stack.enter_context(fresh_namespace(own))

        def start(name: str, *, broker_url: str, web_url: str, zookeeper: str) -> Any:
            port = free_port()
            config = write_config(
                directory,
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
            zookeeper=own.zookeeper,
        )
        yield Partition(steady, isolated, broker, (zookeeper, admin), namespace)


@dataclass
class PartitionFigures:
    leader_moved: float  # seconds from the partition to the other replica leading
    partition_seconds: float
    recovery_seconds: float  # from healed to the isolated replica's first new confirm
    steady_confirmed_during: int
    steady_confirmed: int
    isolated_confirmed: int
    isolated_nacked: int
    delivered: int
    duplicates: int
    closes: dict[str, list[str]]  # client -> the closes it saw

    def describe(self) -> str:
        return (
            f"leader moved {self.leader_moved:.1f} s after the partition; partition "
            f"{self.partition_seconds:.1f} s, the steady replica confirmed "
            f"{self.steady_confirmed_during} meanwhile; first confirm on the isolated replica "
            f"{self.recovery_seconds:.2f} s after healing; confirmed {self.steady_confirmed} + "
            f"{self.isolated_confirmed} (isolated), {self.isolated_nacked} nacked, "
            f"{self.delivered} delivered ({self.duplicates} duplicates); closes seen: "
            f"{ {name: closes for name, closes in self.closes.items() if closes} or 'none' }"
        )


def through_a_partition(partition: Partition, *, stalled: float) -> PartitionFigures:
    """Publishers and consumers on both replicas, on one queue; the partition lasts until the
    other replica leads, its clients did 100 more round trips and the isolated replica's
    publisher had no confirm for ``stalled`` seconds; then it heals, and every confirmed
    message must be delivered."""
    steady, isolated = partition.steady, partition.isolated
    queue = unique("work")
    connect(steady.port).channel().queue_declare(queue, durable=True)
    on_steady = Publisher(steady.port, queue, name="steady publisher")
    on_isolated = Publisher(isolated.port, queue, first=1_000_000, name="isolated publisher")
    consuming_steady = Consumer(steady.port, queue, name="steady consumer")
    consuming_isolated = Consumer(isolated.port, queue, name="isolated consumer")
    clients: list[Publisher | Consumer] = [
        on_steady,
        on_isolated,
        consuming_steady,
        consuming_isolated,
    ]

    def delivered() -> set[int]:
        return set(consuming_steady.received) | set(consuming_isolated.received)

    for client in clients:
        client.start()
    try:
        wait_until(
            lambda: min(len(on_steady.confirmed), len(on_isolated.confirmed)) >= 100,
            timeout=60,
            what="100 confirms on each replica",
        )
        wait_until(lambda: len(delivered()) >= 100, timeout=60, what="deliveries")
        # Both replicas' connections to the broker go through the advertised address's proxy.
        assert partition.broker.connections >= 2, partition.broker.connections

        lines = len(steady.output())
        cut = time.monotonic()
        at_cut = len(on_steady.confirmed)
        partition.start()
        # The rest of the fleet is unaffected: the other replica takes the lead, and its
        # clients publish and consume on.
        steady.wait_for(
            f"now leads namespace public/{partition.namespace}", start=lines, timeout=60
        )
        leader_moved = time.monotonic() - cut
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
            lambda: on_isolated.stalled_for() >= stalled,
            timeout=stalled + 60,
            what=f"the isolated replica's publisher without a confirm for {stalled} s",
        )
        assert isolated.alive()

        healed = time.monotonic()
        steady_during = len(on_steady.confirmed) - at_cut
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
    return PartitionFigures(
        leader_moved=leader_moved,
        partition_seconds=healed - cut,
        recovery_seconds=first - healed,
        steady_confirmed_during=steady_during,
        steady_confirmed=len(on_steady.confirmed),
        isolated_confirmed=len(on_isolated.confirmed),
        isolated_nacked=len(on_isolated.nacked),
        delivered=len(delivered()),
        duplicates=consuming_steady.deliveries + consuming_isolated.deliveries - len(delivered()),
        closes={client.name: client.log.closes for client in clients},
    )
