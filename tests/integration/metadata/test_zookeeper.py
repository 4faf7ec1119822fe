"""What only the ZooKeeper store has: the znodes on disk, losing and regaining ZooKeeper, the
startup load, big cascades, chroots, and znodes it did not write.

Faults are made with a TCP proxy on loopback between one store and ZooKeeper (the shared
stack is never stopped): ``cut()`` drops the connection and refuses new ones.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
import zlib
from collections.abc import Callable

import pytest
import trio
import trio.testing
from kazoo.client import KazooClient

from gateway.amqp.fieldtable import Field
from gateway.metadata.store import MetadataUnavailable, QueueCondition
from gateway.metadata.zookeeper import ZooKeeperMetadataStore
from gateway.model.entities import Binding, Exchange, ExchangeBinding, ExchangeType, Queue
from tests.integration.metadata.conftest import DEADLINE, ZooKeeperFleet, wait_for
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration


def _bucket(child: str) -> str:
    return f"{zlib.crc32(child.encode()) % 256:02x}"


async def test_znode_layout(zk_fleet: ZooKeeperFleet, raw: KazooClient, namespace: str) -> None:
    store = await zk_fleet.replica()
    await store.open(namespace)
    await store.create_queue(namespace, Queue("a/b", durable=True, arguments={"x": Field("u", 7)}))
    await store.create_exchange(namespace, Exchange("ex", ExchangeType.TOPIC))
    await store.add_binding(namespace, Binding("a/b", "ex", "k.#"))
    await store.register_topic_key(namespace, "ex", "k.1")
    await store.add_exchange_binding(namespace, ExchangeBinding("ex", "amq.topic", "k.*"))

    root = f"{zk_fleet.prefix}/vhosts/{namespace.replace('/', '%2F')}"
    data, _ = raw.get(root)
    assert json.loads(data) == {"v": 1, "buckets": 256}
    assert sorted(raw.get_children(root)) == [
        "bindings",
        "consumers",
        "deliveries",
        "drains",
        "exchange-bindings",
        "exchanges",
        "leader",
        "owners",
        "queues",
        "topic-keys",
    ]

    queue_path = f"{root}/queues/{_bucket('a%2Fb')}/a%2Fb"
    data, _stat = raw.get(queue_path)
    document = json.loads(data)
    assert document["durable"] is True and document["exclusive"] is False
    assert document["v"] == 1 and "arguments" in document
    binding = "a%2Fb,ex,k.#"
    assert raw.get(f"{root}/bindings/{_bucket(binding)}/{binding}")[0] == b'{"v":1}'
    # Refs under the queue and the exchange: what a cascading delete lists and guards on.
    assert raw.get_children(queue_path) == [binding]
    edge = ",ex,amq.topic,k.*"  # an exchange binding's id starts with ","
    assert raw.get(f"{root}/exchange-bindings/{_bucket(edge)}/{edge}")[0] == b'{"v":1}'
    assert sorted(raw.get_children(f"{root}/exchanges/{_bucket('ex')}/ex")) == [edge, binding]
    assert raw.get_children(f"{root}/exchanges/{_bucket('amq.topic')}/amq.topic") == [edge]
    # An exchange's topic keys share the exchange's bucket: one listing gives them all.
    key = "ex,k.1"
    assert raw.exists(f"{root}/topic-keys/{_bucket('ex')}/{key}") is not None
    # The default exchange "" is "%".
    assert raw.exists(f"{root}/exchanges/{_bucket('%')}/%") is not None


async def test_outage_keeps_the_view_refuses_writes_and_resyncs(
    zk_fleet: ZooKeeperFleet, proxy: TcpProxy, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    a = await zk_fleet.replica(hosts=proxy.address)
    b = await zk_fleet.replica()
    await a.open(namespace)
    await b.open(namespace)
    for name in ("kept", "doomed", "replaced"):
        await a.create_queue(namespace, Queue(name, arguments={"v": Field("b", 1)}))
    await a.add_binding(namespace, Binding("kept", "amq.direct", "k"))
    await wait_for(b, namespace, lambda v: Binding("kept", "amq.direct", "k") in v.bindings)
    before = a.view(namespace)

    proxy.cut()
    with trio.fail_after(DEADLINE):
        await a.wait_connected(False)
    assert not a.connected
    with pytest.raises(MetadataUnavailable, match="unreachable"):
        await a.create_queue(namespace, Queue("during"))
    with pytest.raises(MetadataUnavailable):
        await a.add_binding(namespace, Binding("kept", "amq.fanout", ""))
    assert a.view(namespace) == before  # reads go on from the cache

    # Meanwhile another replica changes things, including a delete + re-create under the same
    # name (which only the bucket's cversion can reveal to a listing).
    await b.delete_queue(namespace, "doomed")
    await b.create_queue(namespace, Queue("new"))
    await b.add_binding(namespace, Binding("new", "amq.fanout", ""))
    await b.delete_queue(namespace, "replaced")
    await b.create_queue(namespace, Queue("replaced", arguments={"v": Field("b", 2)}))
    await b.register_topic_key(namespace, "amq.topic", "during.outage")

    with caplog.at_level(logging.INFO, logger="gateway.metadata.zookeeper"):
        proxy.restore()
        with trio.fail_after(DEADLINE):
            await a.wait_connected(True)
        view = await wait_for(
            a,
            namespace,
            lambda v: (
                "doomed" not in v.queues
                and Binding("new", "amq.fanout", "") in v.bindings
                and v.queues["replaced"].arguments.get("v") == Field("b", 2)
                and "during.outage" in v.topic_keys.get("amq.topic", ())
            ),
        )
        assert set(view.queues) == {"kept", "new", "replaced"}
        # Writes work again, and the watches are back.
        await a.create_queue(namespace, Queue("after"))
        await b.create_queue(namespace, Queue("after-b"))
        await wait_for(a, namespace, lambda v: "after-b" in v.queues)
        await wait_for(b, namespace, lambda v: "after" in v.queues)
    # Everything the resync read was answered before "after-b" was (one session, in order).
    messages = [record.getMessage() for record in caplog.records]
    assert any(f"resynchronised namespace {namespace}" in m for m in messages), messages


async def test_session_expiry_resyncs_with_a_new_session(
    zk_fleet: ZooKeeperFleet,
    proxy: TcpProxy,
    raw: KazooClient,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a = await zk_fleet.replica(hosts=proxy.address, session_timeout=4)
    b = await zk_fleet.replica()
    await a.open(namespace)
    await b.open(namespace)
    await a.create_queue(namespace, Queue("q"))
    # An ephemeral znode of a's session tells when the server has expired that session.
    marker = f"{zk_fleet.prefix}/session-marker"
    await trio.to_thread.run_sync(
        # A peek at the private client: only a session of its own can own the marker.
        lambda: a._client.create(marker, ephemeral=True)
    )
    expired = threading.Event()
    if raw.exists(marker, watch=lambda event: expired.set()) is None:
        expired.set()

    proxy.cut()
    await b.delete_queue(namespace, "q")
    await b.create_queue(namespace, Queue("q2"))
    assert await trio.to_thread.run_sync(expired.wait, 60), "the session never expired"
    assert "q" in a.view(namespace).queues  # still the cached view

    with caplog.at_level(logging.INFO, logger="gateway.metadata.zookeeper"):
        proxy.restore()
        view = await wait_for(a, namespace, lambda v: "q2" in v.queues and "q" not in v.queues)
    assert any("session lost" in record.getMessage() for record in caplog.records)
    assert set(view.queues) == {"q2"}
    await a.create_queue(namespace, Queue("q3"))
    await b.create_queue(namespace, Queue("q4"))
    await wait_for(a, namespace, lambda v: "q4" in v.queues)


async def test_open_loads_everything_and_reports_the_time(
    zk_fleet: ZooKeeperFleet, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    writer = await zk_fleet.replica()
    queues = [Queue(f"q{index}", durable=True) for index in range(1200)]
    await writer.bulk_create(
        namespace,
        exchanges=[Exchange("x", ExchangeType.DIRECT)],
        queues=queues,
        bindings=[Binding(q.name, "x", q.name) for q in queues]
        + [Binding("q0", "x", "h", {"x-match": Field("S", "all")})],
    )
    late = await zk_fleet.replica()
    with caplog.at_level(logging.INFO, logger="gateway.metadata.zookeeper"):
        view = await late.open(namespace)
    assert len(view.queues) == 1200
    assert len(view.bindings) == 1201
    assert view.exchanges["x"].type is ExchangeType.DIRECT
    seconds = late.load_seconds(namespace)
    assert seconds is not None and seconds > 0
    messages = [r.getMessage() for r in caplog.records if "loaded namespace" in r.getMessage()]
    assert len(messages) == 1
    assert f"loaded namespace {namespace} from ZooKeeper in" in messages[0]
    assert "1200 queues, 1201 bindings" in messages[0]


async def test_cascades_larger_than_one_transaction(
    zk_fleet: ZooKeeperFleet, raw: KazooClient, namespace: str
) -> None:
    store = await zk_fleet.replica()
    await store.open(namespace)
    queues = [Queue(f"q{index}") for index in range(400)]
    await store.bulk_create(
        namespace,
        exchanges=[Exchange("fan", ExchangeType.FANOUT)],
        queues=[*queues, Queue("hub")],
        bindings=[Binding(q.name, "fan", "") for q in queues]
        + [Binding("hub", "amq.direct", f"k{index}") for index in range(700)],
    )
    assert len(store.view(namespace).bindings) == 1100
    assert await store.delete_queue(namespace, "hub")  # 2,101 znodes: three transactions
    assert await store.delete_exchange(namespace, "fan")  # 1,201 znodes: two
    assert store.view(namespace).bindings == frozenset()
    root = f"{zk_fleet.prefix}/vhosts/{namespace.replace('/', '%2F')}"
    for bucket in raw.get_children(f"{root}/bindings"):
        assert raw.get_children(f"{root}/bindings/{bucket}") == []
    amq_direct = f"{root}/exchanges/{_bucket('amq.direct')}/amq.direct"
    assert raw.get_children(amq_direct) == []
    fresh = await zk_fleet.replica()
    view = await fresh.open(namespace)
    assert len(view.queues) == 400 and not view.bindings


async def test_chrooted_hosts(zk_hosts: str, raw: KazooClient, namespace: str) -> None:
    chroot = f"/chroot-test-{uuid.uuid4().hex[:8]}"
    raw.create(chroot)
    try:
        async with (
            ZooKeeperMetadataStore(f"{zk_hosts}{chroot}") as a,
            ZooKeeperMetadataStore(f"{zk_hosts}{chroot}") as b,
        ):
            await a.open(namespace)
            await a.create_queue(namespace, Queue("q", arguments={"x": Field("S", "y")}))
            view = await b.open(namespace)  # loads through a multiRead under the chroot
            assert view.queues["q"].arguments == {"x": Field("S", "y")}
        assert raw.exists(f"{chroot}/starlight-rabbitmq/vhosts") is not None
    finally:
        raw.delete(chroot, recursive=True)


async def test_znodes_it_did_not_write_are_ignored(
    zk_fleet: ZooKeeperFleet, raw: KazooClient, namespace: str
) -> None:
    store = await zk_fleet.replica()
    await store.open(namespace)
    await store.create_queue(namespace, Queue("good"))
    root = f"{zk_fleet.prefix}/vhosts/{namespace.replace('/', '%2F')}"
    raw.ensure_path(f"{root}/queues/00")
    raw.create(f"{root}/queues/00/broken", b"not json")
    raw.ensure_path(f"{root}/bindings/00")
    raw.create(f"{root}/bindings/00/not-a-binding-id")
    fresh = await zk_fleet.replica()
    view = await fresh.open(namespace)
    assert set(view.queues) == {"good"}
    assert not view.bindings


async def test_unreachable_and_closed(zk_fleet: ZooKeeperFleet, proxy: TcpProxy) -> None:
    proxy.cut()
    unreachable = ZooKeeperMetadataStore(proxy.address, connect_timeout=1)
    with pytest.raises(MetadataUnavailable, match="cannot connect"):
        await unreachable.open("public/x")
    await unreachable.aclose()
    store = await zk_fleet.replica()
    await store.aclose()
    with pytest.raises(MetadataUnavailable, match="closed"):
        await store.create_queue("public/x", Queue("q"))


async def test_delete_namespace(zk_fleet: ZooKeeperFleet, raw: KazooClient, namespace: str) -> None:
    store = await zk_fleet.replica()
    await store.open(namespace)
    queues = [Queue(f"q{index}") for index in range(300)]
    await store.bulk_create(
        namespace, queues=queues, bindings=[Binding(q.name, "amq.fanout", "") for q in queues]
    )
    await store.register_topic_key(namespace, "amq.topic", "k")
    await store.delete_namespace(namespace)
    root = f"{zk_fleet.prefix}/vhosts/{namespace.replace('/', '%2F')}"
    assert raw.exists(root) is None
    with pytest.raises(KeyError):
        store.view(namespace)
    view = await store.open(namespace)
    assert not view.queues and not view.bindings and not view.topic_keys


async def test_dangling_refs_are_repaired(
    zk_fleet: ZooKeeperFleet, raw: KazooClient, namespace: str
) -> None:
    """Refs without their binding (only a hand edit or a bug makes them) block nothing."""
    store = await zk_fleet.replica()
    await store.open(namespace)
    await store.create_queue(namespace, Queue("q"))
    await store.create_exchange(namespace, Exchange("x", ExchangeType.DIRECT))
    root = f"{zk_fleet.prefix}/vhosts/{namespace.replace('/', '%2F')}"
    queue_node = f"{root}/queues/{_bucket('q')}/q"
    exchange_node = f"{root}/exchanges/{_bucket('x')}/x"
    raw.create(f"{exchange_node}/q,x,k")  # as if the binding q -> x (k) had half gone
    assert await store.add_binding(namespace, Binding("q", "x", "k"))
    raw.create(f"{queue_node}/q,amq.direct,gone")
    assert await store.add_binding(namespace, Binding("q", "amq.fanout", ""))
    assert await store.delete_queue(namespace, "q")
    assert raw.exists(queue_node) is None
    assert raw.get_children(exchange_node) == []
    assert store.view(namespace).bindings == frozenset()


async def test_a_new_session_claims_its_records_again_unless_their_queue_went(
    zk_fleet: ZooKeeperFleet,
    proxy: TcpProxy,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a's session expires while a lives on (ZooKeeper was out of reach for longer than the
    # session timeout): its owner and consumer records went with the session. Once back, a
    # claims them again, except for the queue the leader deleted meanwhile.
    a = await zk_fleet.replica(hosts=proxy.address, session_timeout=4)
    b = await zk_fleet.replica()
    await a.open(namespace)
    await b.open(namespace)
    await a.create_queue(namespace, Queue("kept", exclusive=True, owner="conn-1"))
    await a.create_queue(namespace, Queue("reaped", exclusive=True, owner="conn-1"))
    await a.create_queue(namespace, Queue("work"))
    await a.add_consumer(namespace, "work", exclusive=False)
    await wait_for(b, namespace, lambda v: v.owned == {"kept", "reaped"} and bool(v.consumers))

    proxy.cut()
    with trio.fail_after(60):
        await wait_for(b, namespace, lambda v: not v.owned and not v.consumers, timeout=60)
    assert await b.delete_queue(namespace, "reaped", condition=QueueCondition.ORPHANED)

    with caplog.at_level(logging.INFO, logger="gateway.metadata.zookeeper"):
        proxy.restore()
        view = await wait_for(
            b, namespace, lambda v: v.owned == {"kept"} and v.consumers == {"work": 1}
        )
    assert "reaped" not in view.queues
    await wait_for(a, namespace, lambda v: "reaped" not in v.queues and v.owned == {"kept"})
    assert any("claiming 3 owner and consumer" in r.getMessage() for r in caplog.records)


async def test_a_leader_that_loses_zookeeper_stops_and_the_other_takes_over(
    zk_fleet: ZooKeeperFleet, proxy: TcpProxy, namespace: str
) -> None:
    cut_off = await zk_fleet.replica(hosts=proxy.address, session_timeout=4)
    steady = await zk_fleet.replica()
    await cut_off.open(namespace)
    await steady.open(namespace)
    leading: set[str] = set()
    changed = trio.Event()

    async def serve(store: ZooKeeperMetadataStore) -> None:
        nonlocal changed
        leading.add(store.replica_id)
        changed.set()
        changed = trio.Event()
        try:
            await trio.sleep_forever()
        finally:
            leading.discard(store.replica_id)
            changed.set()
            changed = trio.Event()

    async def until(condition: Callable[[], bool], timeout: float = DEADLINE) -> None:
        with trio.fail_after(timeout):
            while not condition():
                await changed.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cut_off.lead, namespace, lambda: serve(cut_off))
        await until(lambda: leading == {cut_off.replica_id})
        nursery.start_soon(steady.lead, namespace, lambda: serve(steady))
        await trio.testing.wait_all_tasks_blocked()
        assert leading == {cut_off.replica_id}  # the second candidate waits its turn

        proxy.cut()
        # It stops leading as soon as it cannot reach ZooKeeper (it may have lost the
        # session), and the other leads once the session has expired.
        await until(lambda: cut_off.replica_id not in leading)
        await until(lambda: leading == {steady.replica_id}, timeout=60)
        assert await steady.leader_of(namespace) == steady.replica_id

        proxy.restore()
        await cut_off.wait_connected()
        # Back with a new session, it stands again, behind the leader.
        with trio.fail_after(DEADLINE):
            while True:
                candidates = await steady._calls.children(  # a look at the candidates
                    zk_fleet.stores[0].layout.leader(namespace), "list candidates"
                )
                if len(candidates) == 2:
                    break
                await trio.sleep(0.05)  # polling a condition with a deadline
        assert leading == {steady.replica_id}
        nursery.cancel_scope.cancel()
