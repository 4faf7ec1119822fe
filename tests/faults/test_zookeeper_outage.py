"""Issue 17 item 2: a replica loses ZooKeeper, then its session, and gets both back.

Two gateway processes serve one namespace on the shared stack: ``steady`` reaches ZooKeeper
directly and starts first (so it, not the other, leads the namespace: it runs the reaper);
``cut`` reaches ZooKeeper through a TCP proxy the test cuts (tests/faults/proxies.py) and has
a session timeout of 4 s, so that ZooKeeper expires its session soon after the cut. The store's
side of this (views kept, writes refused, resync, records claimed again) is tested on the bare
store in tests/integration/metadata/test_zookeeper.py; here it is what AMQP clients see."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pika
import pytest
from kazoo.client import KazooClient

from gateway.metadata.paths import Folder, Layout
from tests.faults.gateway_process import wait_until
from tests.faults.outages import Consumer, Publisher
from tests.faults.proxies import ProxyThread
from tests.support.clients import connect, unique
from tests.support.gateway_process import GatewayProcess, free_port, write_config
from tests.support.pulsar_gateway import fresh_namespace

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 4000  # the cut replica's: ZooKeeper expires its session this long after
EXPIRED_FOR = 3.0  # seconds the replica stays cut off after its session expired
RECORD_FOLDERS = (Folder.OWNERS.value, Folder.CONSUMERS.value)


class Replicas:
    def __init__(self, steady: GatewayProcess, cut: GatewayProcess, proxy: ProxyThread) -> None:
        self.steady = steady
        self.cut = cut
        self.proxy = proxy
        self.namespace = ""


@pytest.fixture
def replicas(pulsar_stack: Any, tmp_path: Path) -> Iterator[Replicas]:
    host, port = pulsar_stack.zookeeper.rsplit(":", 1)
    with (
        fresh_namespace(pulsar_stack) as namespace,
        ProxyThread(host, int(port)) as proxy,
        ExitStack() as running,
    ):

        def start(name: str, zookeeper: str, extra: str = "") -> GatewayProcess:
            port = free_port()
            config = write_config(
                tmp_path,
                port=port,
                namespace=namespace,
                zookeeper=zookeeper,
                web_url=pulsar_stack.web_url,
                broker_url=pulsar_stack.broker_url,
                extra=extra,
            )
            process = GatewayProcess(name, config, port)
            running.callback(process.close)
            return process.start().wait_ready()

        steady = start("steady", pulsar_stack.zookeeper)
        # A replica opens a vhost at its first connection: this one stands for leader first.
        connect(steady.port).close()
        steady.wait_for(r"now leads namespace public/" + namespace)
        cut = start(
            "cut",
            f"127.0.0.1:{proxy.port}",
            f"zooKeeperSessionTimeoutMs={SESSION_TIMEOUT_MS}\n",
        )
        started = Replicas(steady, cut, proxy)
        started.namespace = f"public/{namespace}"
        yield started


def _records(zookeeper: KazooClient, namespace: str) -> dict[str, int]:
    """The ephemeral owner and consumer records of ``namespace``: path -> session."""
    found: dict[str, int] = {}
    root = Layout().namespace(namespace)
    for folder in RECORD_FOLDERS:
        base = f"{root}/{folder}"
        for bucket in zookeeper.get_children(base):
            for child in zookeeper.get_children(f"{base}/{bucket}"):
                stat = zookeeper.exists(f"{base}/{bucket}/{child}")
                if stat is not None and stat.ephemeralOwner:
                    found[f"{bucket}/{child}"] = stat.ephemeralOwner
    return found


def test_zookeeper_lost_then_the_session_expired_and_back(
    replicas: Replicas, pulsar_stack: Any
) -> None:
    cut, steady = replicas.cut, replicas.steady
    zookeeper = KazooClient(hosts=pulsar_stack.zookeeper)
    zookeeper.start(30)
    owner = connect(cut.port)
    publisher = consumer = None
    try:
        # On the replica about to lose ZooKeeper: a durable queue with a consumer and a
        # publisher, an exclusive queue, and an auto-delete queue with a consumer (the last
        # two are what the leader's reaper deletes when their records are gone).
        channel = owner.channel()
        work = unique("work")
        channel.queue_declare(work, durable=True)
        mine = channel.queue_declare("", exclusive=True).method.queue
        auto = unique("auto")
        channel.queue_declare(auto, auto_delete=True)
        got_auto: list[bytes] = []
        channel.basic_consume(auto, lambda _c, _m, _p, body: got_auto.append(body), auto_ack=True)
        publisher, consumer = Publisher(cut.port, work), Consumer(cut.port, work)
        publisher.start()
        consumer.start()
        wait_until(
            lambda: len(_records(zookeeper, replicas.namespace)) >= 3,
            timeout=30,
            what="the owner and consumer records in ZooKeeper",
        )
        before = _records(zookeeper, replicas.namespace)
        sessions = set(before.values())

        lines = len(cut.output())
        went = time.monotonic()
        replicas.proxy.cut()
        cut.wait_for(r"ZooKeeper connection suspended", start=lines, timeout=30)

        # Metadata changes are refused at once with a reply code, not left hanging (541
        # INTERNAL_ERROR is a connection error in AMQP 0-9-1: only that connection closes) ...
        refused = connect(cut.port).channel()
        asked = time.monotonic()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as declare:
            refused.queue_declare(unique("during"), durable=True)
        refusal = time.monotonic() - asked
        assert declare.value.reply_code == 541, declare.value
        assert "metadata store unavailable" in declare.value.reply_text
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as bind:
            connect(cut.port).channel().queue_bind(work, "amq.topic", "during.#")
        assert bind.value.reply_code == 541, bind.value
        # ... while publishing and consuming on what exists go on from the view.
        confirmed = len(publisher.confirmed)
        wait_until(
            lambda: len(publisher.confirmed) >= confirmed + 50,
            timeout=30,
            what="50 confirms during the outage",
        )
        received = len(consumer.received)
        wait_until(
            lambda: len(consumer.received) >= received + 50,
            timeout=30,
            what="50 deliveries during the outage",
        )

        # ZooKeeper expires the session: the records are gone, and the leader's reaper sees
        # an exclusive queue without its owner, an auto-delete queue without consumers.
        wait_until(
            lambda: not sessions & set(_records(zookeeper, replicas.namespace).values()),
            timeout=SESSION_TIMEOUT_MS / 1000 + 30,
            what="the cut replica's session to expire",
        )
        # The replica stays cut off a little longer (the fault's length, not a synchronisation):
        # several ticks of the leader's reaper see the queues without their records.
        expired = time.monotonic()
        expiry = expired - went
        wait_until(
            lambda: time.monotonic() - expired >= EXPIRED_FOR,
            timeout=EXPIRED_FOR + 1,
            what=f"{EXPIRED_FOR} s of the partition after the expiry",
        )
        lines = len(cut.output())
        back = time.monotonic()
        replicas.proxy.restore()
        cut.wait_for(r"claiming \d+ owner and consumer record\(s\) again", start=lines, timeout=60)
        wait_until(
            lambda: set(_records(zookeeper, replicas.namespace)) == set(before),
            timeout=30,
            what="every record claimed again",
        )
        claimed = time.monotonic() - back
        # Nothing was reaped: the exclusive queue is still its owner's, the auto-delete queue
        # still has its consumer, and declares work again.
        assert not steady.matching(r"leader: deleted queue"), steady.matching(r"leader: deleted")
        other = connect(steady.port).channel()
        other.basic_publish("", auto, b"after")
        wait_until(
            lambda: (owner.process_data_events(0.1), got_auto)[1] == [b"after"],
            timeout=30,
            what="the auto-delete queue's consumer to get a message",
        )
        channel.queue_declare(mine, passive=True, exclusive=True)
        connect(cut.port).channel().queue_declare(unique("after"), durable=True)
        publisher.stop()
        wait_until(
            lambda: set(publisher.confirmed) <= set(consumer.received),
            timeout=60,
            what="every confirmed message delivered",
        )
        consumer.stop()
        assert not publisher.log.closes and not consumer.log.closes
        print(
            f"declare refused in {refusal * 1000:.0f} ms (541); {len(publisher.confirmed)} "
            f"confirmed, all delivered, {len(publisher.nacked)} nacked; records gone "
            f"{expiry:.1f} s after the cut (session timeout {SESSION_TIMEOUT_MS} ms), all "
            f"{len(before)} claimed again {claimed:.2f} s after ZooKeeper was back; "
            f"nothing reaped"
        )
    finally:
        for client in (publisher, consumer):
            if client is not None:
                client.stopping.set()
        owner.close()
        zookeeper.stop()
        zookeeper.close()
