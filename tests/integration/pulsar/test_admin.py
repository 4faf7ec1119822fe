"""PulsarAdmin against the real broker: CRUD, 404/409/412 behaviour, odd names, positions."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable

import pytest
import sniffio
import trio

from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.client import PulsarClient
from gateway.pulsar.consumer import ConsumerOptions
from gateway.pulsar.errors import AdminError, NotFound, PreconditionFailed, Unavailable
from gateway.pulsar.ids import MessageId
from gateway.pulsar.producer import ProducerOptions
from gateway.pulsar.retry import RetryPolicy
from tests.integration.pulsar.conftest import TENANT

pytestmark = pytest.mark.integration

Topic = Callable[[str], str]

# Local names the gateway's encoding may produce, and then some: all accepted by Pulsar 4.0.8
# through both the REST API and the binary protocol.
ODD_LOCAL_NAMES = [
    "100%",
    "a b",
    "é€😀",
    "k=v",
    "a+b",
    "x:y",
    "q?r#s&t",
    "%2F",
    "back\\slash",
    "tab\tand\nnewline",
    "ex__rk.with.dots",
    "-partition-0x",
]


async def test_httpx_runs_under_trio(admin: PulsarAdmin) -> None:
    assert sniffio.current_async_library() == "trio"
    assert await admin.tenant_exists(TENANT)
    assert not await admin.tenant_exists("no-such-tenant-x")


async def test_namespace_crud(admin: PulsarAdmin, namespace: str) -> None:
    tenant, ns = namespace.split("/")
    assert await admin.namespace_exists(tenant, ns)
    assert await admin.create_namespace(tenant, ns) is False  # 409 → False
    assert namespace in await admin.list_namespaces(tenant)
    extra = ns + "-x"
    assert await admin.create_namespace(tenant, extra) is True
    assert await admin.delete_namespace(tenant, extra) is True
    assert await admin.delete_namespace(tenant, extra) is False  # 404 → False
    assert not await admin.namespace_exists(tenant, extra)
    with pytest.raises(NotFound):
        await admin.create_namespace("no-such-tenant-x", "ns")


@pytest.mark.parametrize("local", ODD_LOCAL_NAMES)
async def test_odd_topic_names_round_trip(
    admin: PulsarAdmin, client: PulsarClient, namespace: str, topic: Topic, local: str
) -> None:
    name = topic(local)
    assert await admin.create_topic(name) is True
    assert await admin.create_topic(name) is False
    assert await admin.topic_exists(name)
    tenant, ns = namespace.split("/")
    assert name in await admin.list_topics(tenant, ns)
    # The binary protocol sees the same topic.
    producer = await client.create_producer(name, ProducerOptions(batching_enabled=False))
    consumer = await client.subscribe(name, "sub é/1", ConsumerOptions(initial_position="earliest"))
    sent = await producer.send(b"payload", {"name": local})
    with trio.fail_after(10):
        message = await consumer.receive()
    assert (message.payload, message.properties, message.topic) == (
        b"payload",
        {"name": local},
        name,
    )
    assert message.message_id == sent
    stats = await admin.topic_stats(name)
    assert stats.msg_in_counter == 1
    assert "sub é/1" in stats.subscriptions
    assert await admin.last_message_id(name) == sent
    await consumer.aclose()
    await producer.aclose()
    assert await admin.delete_subscription(name, "sub é/1") is True
    assert await admin.delete_topic(name) is True
    assert await admin.delete_topic(name) is False
    assert not await admin.topic_exists(name)


@pytest.mark.parametrize(
    ("raw_local", "status"),
    [
        ("%20", 412),  # blank: "Topic name is not valid"
        ("%09%0A", 412),
        ("x-partition-0", 412),  # reserved for partitions
        ("nul%00byte", 400),  # Jetty: "Bad Message 400"
    ],
)
async def test_names_pulsar_refuses(
    admin: PulsarAdmin, namespace: str, raw_local: str, status: int
) -> None:
    # Raw paths: TopicName.parse refuses most of these before any request is made.
    with pytest.raises(AdminError) as info:
        await admin.request("PUT", f"/admin/v2/persistent/{namespace}/{raw_local}")
    assert info.value.status == status


async def test_subscription_positions(
    admin: PulsarAdmin, client: PulsarClient, topic: Topic
) -> None:
    name = topic("positions")
    producer = await client.create_producer(name, ProducerOptions(batching_enabled=False))
    early = [await producer.send(f"early-{i}".encode()) for i in range(3)]
    assert await admin.create_subscription(name, "from-latest", "latest") is True
    assert await admin.create_subscription(name, "from-earliest", "earliest") is True
    assert await admin.create_subscription(name, "from-id", early[1]) is True
    assert await admin.create_subscription(name, "from-latest") is False  # exists
    for i in range(2):
        await producer.send(f"late-{i}".encode())
    backlogs = {
        sub: await admin.subscription_backlog(name, sub)
        for sub in ("from-latest", "from-earliest", "from-id")
    }
    assert backlogs == {"from-latest": 2, "from-earliest": 5, "from-id": 4}

    async def drain(sub: str, count: int) -> list[bytes]:
        consumer = await client.subscribe(name, sub)
        got = []
        with trio.fail_after(10):
            for _ in range(count):
                message = await consumer.receive()
                got.append(message.payload)
                consumer.acknowledge(message)
        await consumer.aclose()
        return got

    assert await drain("from-latest", 2) == [b"late-0", b"late-1"]
    assert await drain("from-id", 4) == [b"early-1", b"early-2", b"late-0", b"late-1"]
    assert (await drain("from-earliest", 5))[0] == b"early-0"


async def test_subscription_delete_skip_and_stats(
    admin: PulsarAdmin, client: PulsarClient, topic: Topic
) -> None:
    name = topic("stats")
    assert await admin.delete_subscription(name, "nope") is False
    with pytest.raises(NotFound):
        await admin.skip_all(name, "nope")
    assert await admin.create_subscription(name, "q", "earliest")
    producer = await client.create_producer(name, ProducerOptions(batching_enabled=False))
    for i in range(7):
        await producer.send(str(i).encode())
    consumer = await client.subscribe(name, "q", ConsumerOptions(receiver_queue_size=2))
    with trio.fail_after(10):
        first = await consumer.receive()
    stats = await admin.topic_stats(name)
    sub = stats.subscriptions["q"]
    assert sub.msg_backlog == 7 and sub.type == "Shared" and sub.consumer_count == 1
    assert stats.publisher_count == 1 and stats.msg_in_counter == 7
    with pytest.raises(PreconditionFailed):  # a consumer is attached
        await admin.delete_subscription(name, "q")
    consumer.acknowledge(first)
    await admin.skip_all(name, "q")
    assert await admin.subscription_backlog(name, "q") == 0
    assert await admin.delete_subscription(name, "q", force=True) is True
    assert "q" not in await admin.list_subscriptions(name)


async def test_precise_backlog_counts_messages_in_batches(
    admin: PulsarAdmin, client: PulsarClient, topic: Topic
) -> None:
    name = topic("batched")
    assert await admin.create_subscription(name, "q", "earliest")
    producer = await client.create_producer(
        name, ProducerOptions(batching_enabled=True, batching_max_publish_delay_ms=50)
    )
    handles = [producer.send_nowait(b"m") for _ in range(50)]
    for handle in handles:
        await handle.wait()
    approximate = await admin.subscription_backlog(name, "q")
    precise = await admin.subscription_backlog(name, "q", precise=True)
    assert precise == 50
    assert approximate < 50  # msgBacklog counts entries: a batch counts once


async def test_delete_namespace_force_removes_topics_with_clients(
    admin: PulsarAdmin, client: PulsarClient
) -> None:
    ns = f"t-force-{uuid.uuid4().hex[:8]}"
    await admin.create_namespace(TENANT, ns)
    name = f"persistent://{TENANT}/{ns}/busy"
    await client.subscribe(name, "q")
    await client.create_producer(name)
    assert await admin.delete_namespace(TENANT, ns, force=True) is True
    assert not await admin.namespace_exists(TENANT, ns)


async def test_unreachable_admin_fails_fast_with_bounded_retries() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    policy = RetryPolicy(retries=2, timeout=2.0, base_delay=0.05, jitter=0.0)
    async with PulsarAdmin(f"http://127.0.0.1:{port}", policy=policy) as admin:
        start = trio.current_time()
        with pytest.raises(Unavailable) as info:
            await admin.tenant_exists("public")
        elapsed = trio.current_time() - start
    assert "3 attempt" in info.value.reason
    assert elapsed < 1.0  # refused at once; only the 0.05 + 0.1 s backoff is spent
    assert elapsed <= policy.worst_case_seconds()


async def test_last_message_id_of_empty_topic(admin: PulsarAdmin, topic: Topic) -> None:
    name = topic("empty")
    await admin.create_topic(name)
    last = await admin.last_message_id(name)
    assert last.entry_id == -1
    assert isinstance(last, MessageId)
