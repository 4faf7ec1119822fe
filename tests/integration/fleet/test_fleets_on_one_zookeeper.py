"""Two fleets on one ZooKeeper, told apart by the chroot of ``configurationStoreServers``
(docs/fleet.md, "What makes a fleet"): each elects its own leader and keeps its own metadata.

The case made as hard as it gets for the ZooKeeper side: both fleets serve the same vhost on
the same Pulsar namespace, so that only the chroot can separate them (production fleets must
not share a namespace: their queues' subscriptions would meet in Pulsar; the queue names here
differ so that they do not). The chroots do not exist beforehand: the replicas create them.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika.exceptions
import pytest

from gateway.metadata.paths import Layout
from tests.support.clients import connect
from tests.support.fleet import Fleet
from tests.support.fleet_clients import wait_known
from tests.support.gateway_process import GatewayProcess
from tests.support.zookeeper import kazoo_client

pytestmark = pytest.mark.integration

LEADS = r"leader: this replica \((\S+)\) now leads namespace public/{}"


@pytest.fixture
def chroots(pulsar_stack: Any) -> Iterator[tuple[str, str]]:
    """Two chroot paths nobody has created; deleted afterwards with what the replicas wrote."""
    base = f"/two-fleets-{uuid.uuid4().hex[:12]}"
    try:
        yield f"{base}/team-a", f"{base}/team-b"
    finally:
        with kazoo_client(pulsar_stack.zookeeper) as client:
            if client.exists(base):
                client.delete(base, recursive=True)


def stop(processes: list[GatewayProcess]) -> None:
    """SIGTERM, so that their sessions (and ephemeral znodes) end with them."""
    for process in processes:
        if process.process is not None and process.process.poll() is None:
            process.signal(signal.SIGTERM)
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait_exit(60)


def candidates(zookeeper: str, namespace: str) -> set[str]:
    """The replica ids standing for leader of ``namespace`` in the fleet at ``zookeeper``."""
    folder = f"{Layout().namespace(f'public/{namespace}')}/leader"
    with kazoo_client(zookeeper) as client:
        return {
            json.loads(client.get(f"{folder}/{child}")[0])["replica"]
            for child in client.get_children(folder)
        }


def wait_candidates(zookeeper: str, namespace: str, count: int) -> set[str]:
    """``candidates`` once there are ``count`` of them (a replica stands for leader just after
    it opened the vhost for its client; 30 s at most)."""
    deadline = time.monotonic() + 30
    while True:
        found = candidates(zookeeper, namespace)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def wait_leaders(replicas: tuple[GatewayProcess, ...], namespace: str) -> list[str]:
    """The ids in every "now leads" line of ``replicas``, once there is one (30 s at most)."""
    deadline = time.monotonic() + 30
    while True:
        found = [m.group(1) for r in replicas for m in r.matching(LEADS.format(namespace))]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def queues(zookeeper: str, namespace: str) -> set[str]:
    folder = f"{Layout().namespace(f'public/{namespace}')}/queues"
    with kazoo_client(zookeeper) as client:
        return {
            name
            for bucket in client.get_children(folder)
            for name in client.get_children(f"{folder}/{bucket}")
        }


def test_two_fleets_under_different_chroots_never_share_a_leader_or_metadata(
    tmp_path: Path, pulsar_stack: Any, namespace: str, chroots: tuple[str, str]
) -> None:
    zookeeper = pulsar_stack.zookeeper
    a = Fleet(tmp_path, pulsar_stack, namespace, zookeeper=zookeeper + chroots[0])
    b = Fleet(tmp_path, pulsar_stack, namespace, zookeeper=zookeeper + chroots[1])
    try:
        started = [a.start("a-1"), a.start("a-2"), b.start("b-1"), b.start("b-2")]
        a1, a2, b1, b2 = (replica.wait_ready() for replica in started)
        # Each says at start which fleet it is in.
        for replica, chroot in ((a1, chroots[0]), (b1, chroots[1])):
            replica.wait_for(
                rf"gateway: fleet: metadata in ZooKeeper \S+ at {chroot}/starlight-rabbitmq "
                rf"\(chroot {chroot}\)"
            )
        # Every replica opens the vhost (a client), so every one stands for its leader.
        on = {r.name: connect(r.port) for r in (a1, a2, b1, b2)}
        led_a = wait_leaders((a1, a2), namespace)
        led_b = wait_leaders((b1, b2), namespace)
        # One leader per fleet, for the same namespace: not one for both.
        assert len(led_a) == 1 and len(led_b) == 1, (led_a, led_b)
        standing_a = wait_candidates(a.zookeeper, namespace, 2)
        standing_b = wait_candidates(b.zookeeper, namespace, 2)
        assert len(standing_a) == 2 and len(standing_b) == 2
        assert not standing_a & standing_b
        assert led_a[0] in standing_a and led_b[0] in standing_b

        # Metadata: a declare in one fleet is seen by its other replica, never by the other
        # fleet (its passive declare is 404 however long it waits for the watch).
        on["a-1"].channel().queue_declare("only-in-a", durable=True)
        on["b-2"].channel().queue_declare("only-in-b", durable=True)
        wait_known(on["a-2"], "only-in-a")
        wait_known(on["b-1"], "only-in-b")
        for connection, foreign in ((on["b-1"], "only-in-a"), (on["a-2"], "only-in-b")):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                wait_known(connection, foreign, timeout=1)
            assert refused.value.reply_code == 404
        assert queues(a.zookeeper, namespace) == {"only-in-a"}
        assert queues(b.zookeeper, namespace) == {"only-in-b"}
        with kazoo_client(zookeeper) as client:  # nothing outside the chroots
            assert client.exists(Layout().namespace(f"public/{namespace}")) is None

        # Fleet a's leader stops: its other replica leads, fleet b's leader stays.
        leader_a = a1 if a1.matching(LEADS.format(namespace)) else a2
        other_a = a2 if leader_a is a1 else a1
        on.pop(leader_a.name).close()
        stop([leader_a])
        taken = other_a.wait_for(LEADS.format(namespace), timeout=30)[0].group(1)
        assert taken in standing_a and taken != led_a[0]
        assert candidates(a.zookeeper, namespace) == {taken}
        assert candidates(b.zookeeper, namespace) == standing_b
        assert [m.group(1) for r in (b1, b2) for m in r.matching(LEADS.format(namespace))] == led_b
        for connection in on.values():
            connection.close()
    finally:
        stop(a.processes + b.processes)
        a.close()
        b.close()
