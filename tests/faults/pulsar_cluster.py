"""A multi-broker Pulsar of a test's own, and the admin calls its fault tests make.

The cluster is scripts/stack_cluster.py's (the local stack's ``cluster`` profile: one
ZooKeeper, two bookies, two brokers, each a JVM) on free ports, its state in the test's
temporary folder, so that stopping or killing any of its servers touches nothing else. The
helpers ask the brokers who owns a topic, move a topic's bundle from one broker to the
other, and read a topic's producers and consumers from the broker that owns it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from tests.support.own_stack import free_ports
from tests.support.stack_script import load_cluster_module


@dataclass
class OwnCluster:
    """Two brokers, two bookies, one ZooKeeper, on free ports; the test controls each JVM."""

    cluster: Any  # scripts/stack_cluster.py's Cluster

    @property
    def broker_url(self) -> str:
        """Both brokers: ``pulsar://127.0.0.1:p1,127.0.0.1:p2``."""
        return str(self.cluster.broker_url)

    @property
    def zookeeper(self) -> str:
        return str(self.cluster.zookeeper)

    @property
    def cluster_name(self) -> str:
        return str(self.cluster.cluster_name)

    @property
    def brokers(self) -> list[str]:
        return [str(server.name) for server in self.cluster.brokers]

    def web_url(self, *brokers: str) -> str:
        """The web service URL naming ``brokers`` in that order (all of them by default)."""
        names = brokers or tuple(self.brokers)
        ports = [self.cluster.server(name).web_port for name in names]
        return "http://" + ",".join(f"127.0.0.1:{port}" for port in ports)

    def broker_id(self, broker: str) -> str:
        """How Pulsar names the broker (load manager, ``destinationBroker``)."""
        return f"127.0.0.1:{self.cluster.server(broker).web_port}"

    def other(self, broker: str) -> str:
        return next(name for name in self.brokers if name != broker)

    def up(self) -> None:
        """Start whatever is not running (on its data) and wait until the cluster is healthy."""
        load_cluster_module().ensure_up(self.cluster)

    def down(self) -> None:
        load_cluster_module().down(self.cluster)

    def stop(self, server: str) -> None:
        """SIGTERM one server, as an operator restarting it."""
        load_cluster_module().stop_server(self.cluster, server)

    def kill(self, server: str) -> None:
        """SIGKILL one server: a crash (nothing closed or flushed by the JVM)."""
        load_cluster_module().stop_server(self.cluster, server, kill=True)

    def running(self, server: str) -> bool:
        return load_cluster_module().pid(self.cluster, server) is not None

    # ------------------------------------------------------------------ admin, per broker

    def _live_broker(self) -> str:
        return next(name for name in self.brokers if self.running(name))

    def admin(self, broker: str | None = None) -> httpx.Client:
        """A client of one broker's admin API, redirects not followed (a 307 is an answer:
        that broker does not own what was asked)."""
        return httpx.Client(base_url=self.web_url(broker or self._live_broker()), timeout=30)

    def owner(self, topic: str) -> str:
        """The broker that owns ``topic`` (a lookup, which assigns the topic's bundle to a
        broker if none owns it)."""
        with self.admin() as admin:
            response = admin.get("/lookup/v2/topic/" + topic.replace("://", "/", 1))
            response.raise_for_status()
            url = str(response.json()["brokerUrl"])
        return next(
            name for name in self.brokers if url.endswith(f":{self.cluster.server(name).port}")
        )

    def move_topic(self, topic: str, destination: str) -> str:
        """Unload the bundle ``topic`` belongs to, naming ``destination`` as where it goes
        (unloaded without one, the load manager may well choose the same broker again);
        the bundle's range."""
        path = topic.replace("://", "/", 1)
        with self.admin() as admin:
            found = admin.get(f"/lookup/v2/topic/{path}/bundle")
            found.raise_for_status()
            bundle = found.text.strip()
        namespace = "/".join(topic.split("://", 1)[1].split("/")[:2])
        # Asked of the owner; should ownership have changed meanwhile, its 307 says where.
        with httpx.Client(
            base_url=self.web_url(self.owner(topic)), timeout=30, follow_redirects=True
        ) as admin:
            admin.put(
                f"/admin/v2/namespaces/{namespace}/{bundle}/unload",
                params={"destinationBroker": self.broker_id(destination)},
            ).raise_for_status()
        return bundle

    def topics(self, namespace: str) -> list[str]:
        with self.admin() as admin:
            response = admin.get(f"/admin/v2/persistent/{namespace}")
            response.raise_for_status()
            return [str(name) for name in response.json()]

    def stats_on(self, broker: str, topic: str) -> httpx.Response:
        """``topic``'s stats asked of ``broker`` alone: 200 only from its owner, 307 from the
        other."""
        tenant, namespace, local = topic.split("://", 1)[1].split("/")
        path = f"/admin/v2/persistent/{tenant}/{namespace}/{quote(local, safe='')}/stats"
        with self.admin(broker) as admin:
            return admin.get(path)

    def clients_of(self, topic: str, subscription: str) -> tuple[set[str], set[str]]:
        """The names of ``topic``'s producers and of ``subscription``'s consumers, from the
        broker that owns the topic (both sets must be read there, where they connect)."""
        owner = self.owner(topic)
        response = self.stats_on(owner, topic)
        response.raise_for_status()
        stats = response.json()
        producers = {str(p.get("producerName")) for p in stats.get("publishers", [])}
        found = stats.get("subscriptions", {}).get(subscription, {})
        consumers = {str(c.get("consumerName")) for c in found.get("consumers", [])}
        return producers, consumers

    def create_namespace(self, namespace: str) -> None:
        with self.admin() as admin:
            admin.put(f"/admin/v2/namespaces/{namespace}").raise_for_status()


def wait_for_owner(cluster: OwnCluster, topic: str, broker: str, *, timeout: float) -> float:
    """Until ``broker`` owns ``topic`` (lookups, each of which may assign the bundle); the
    moment it does."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cluster.owner(topic) == broker:
                return time.monotonic()
        except httpx.HTTPError:
            pass  # a lookup that fails while ownership is in flux: ask again
        assert time.monotonic() < deadline, f"{broker} did not own {topic} within {timeout} s"
        time.sleep(0.1)  # polling interval of a condition with a deadline


@contextmanager
def own_cluster(directory: Path) -> Iterator[OwnCluster]:
    """A started cluster on free ports with its state in ``directory``, stopped after."""
    module = load_cluster_module()
    started = OwnCluster(module.new_cluster(directory, free_ports(7)))
    began = time.monotonic()
    try:
        started.up()
        print(f"Pulsar cluster (2 brokers, 2 bookies) started in {time.monotonic() - began:.1f} s")
        yield started
    finally:
        started.down()
