"""Virtual hosts → Pulsar tenant/namespace, as reference/002 and docs/mapping.md say.

``amqpDefaultTenant`` T, ``amqpDefaultNamespace`` D, and ``amqpMapShortVhostToTenant``:

| vhost | false | true |
| --- | --- | --- |
| ``/`` (and ``""``) | T/D | T/D |
| ``/x``, ``x`` | T/x | x/D |
| ``/t/n``, ``t/n`` | t/n | t/n |

On both backends the aliases of one namespace share its entities and other vhosts do not; on
Pulsar a message published through each vhost lands in that namespace's topic, a vhost whose
namespace does not exist is refused with 530 naming it, and names Pulsar cannot have are
refused with 530 on both.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pika
import pika.exceptions
import pulsar
import pytest

from gateway.backend.memory import MemoryBackend
from gateway.config import GatewayConfig, config_from_text
from gateway.model.vhost import VhostMapper
from tests.integration.clients.conftest import PULSAR_ONLY
from tests.support.clients import connect, unique
from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_gateway import backend_factory


@dataclass
class Vhosts:
    backend: str
    tenant: str  # amqpDefaultTenant
    namespace: str  # amqpDefaultNamespace
    short: str  # a short vhost name; in short-to-tenant mode also a tenant
    plain: GatewayInThread  # amqpMapShortVhostToTenant=false
    to_tenant: GatewayInThread  # amqpMapShortVhostToTenant=true
    web_url: str = ""
    broker_url: str = ""

    @property
    def pulsar(self) -> bool:
        return self.backend == "pulsar"


class PulsarAdmin:
    """Just enough of the admin REST API to create and remove tenants and namespaces."""

    def __init__(self, web_url: str) -> None:
        self.http = httpx.Client(base_url=web_url, timeout=30)
        self.tenants: list[str] = []
        self.namespaces: list[str] = []

    def tenant(self, name: str) -> None:
        self.http.put(
            f"/admin/v2/tenants/{name}", json={"allowedClusters": ["standalone"]}
        ).raise_for_status()
        self.tenants.append(name)

    def namespace(self, name: str) -> None:
        self.http.put(f"/admin/v2/namespaces/{name}").raise_for_status()
        self.namespaces.append(name)

    def topics(self, namespace: str) -> list[str]:
        reply = self.http.get(f"/admin/v2/namespaces/{namespace}/topics")
        reply.raise_for_status()
        return list(reply.json())

    def close(self) -> None:
        for namespace in reversed(self.namespaces):
            self.http.delete(f"/admin/v2/namespaces/{namespace}", params={"force": "true"})
        for tenant in reversed(self.tenants):
            self.http.delete(f"/admin/v2/tenants/{tenant}")
        self.http.close()


def pulsar_config(stack: Any, tenant: str, namespace: str, to_tenant: bool) -> GatewayConfig:
    return config_from_text(
        f"brokerServiceURL={stack.broker_url}\n"
        f"brokerWebServiceURL={stack.web_url}\n"
        f"configurationStoreServers={stack.zookeeper}\n"
        f"amqpDefaultTenant={tenant}\n"
        f"amqpDefaultNamespace={namespace}\n"
        f"amqpMapShortVhostToTenant={'true' if to_tenant else 'false'}\n",
        environ={},
    )


@pytest.fixture(scope="module", params=["memory", PULSAR_ONLY])
def vhosts(request: pytest.FixtureRequest) -> Iterator[Vhosts]:
    hexes = uuid.uuid4().hex
    tenant, namespace, short = f"vt-{hexes[:8]}", f"d-{hexes[8:16]}", f"vx-{hexes[16:24]}"
    if request.param == "memory":
        with (
            GatewayInThread(backend=MemoryBackend(VhostMapper(tenant, namespace, False))) as plain,
            GatewayInThread(backend=MemoryBackend(VhostMapper(tenant, namespace, True))) as to_t,
        ):
            yield Vhosts("memory", tenant, namespace, short, plain, to_t)
        return
    stack = request.getfixturevalue("pulsar_stack")
    admin = PulsarAdmin(stack.web_url)
    try:
        admin.tenant(tenant)
        admin.tenant(short)  # the short vhost's tenant in short-to-tenant mode
        for name in (
            f"{tenant}/{namespace}",  # "/"
            f"{tenant}/{short}",  # "/x" without short-to-tenant
            f"{short}/{namespace}",  # "/x" with short-to-tenant
            f"{tenant}/n",  # "/t/n"
        ):
            admin.namespace(name)
        with (
            GatewayInThread(
                backend_factory=backend_factory(pulsar_config(stack, tenant, namespace, False))
            ) as plain,
            GatewayInThread(
                backend_factory=backend_factory(pulsar_config(stack, tenant, namespace, True))
            ) as to_t,
        ):
            yield Vhosts(
                "pulsar", tenant, namespace, short, plain, to_t, stack.web_url, stack.broker_url
            )
    finally:
        admin.close()


def aliases(v: Vhosts, to_tenant: bool) -> dict[str, list[str]]:
    """Namespace → the vhosts that must map to it."""
    t, d, x = v.tenant, v.namespace, v.short
    short = [f"/{x}", x, f"/{x}/{d}", f"{x}/{d}"] if to_tenant else [f"/{x}", x, f"/{t}/{x}"]
    return {
        f"{t}/{d}": ["/", "", f"/{t}/{d}", f"{t}/{d}"],
        (f"{x}/{d}" if to_tenant else f"{t}/{x}"): short,
        f"{t}/n": [f"/{t}/n", f"{t}/n"],
    }


@pytest.mark.parametrize("to_tenant", [False, True], ids=["short-to-namespace", "short-to-tenant"])
def test_vhost_aliases_share_one_namespace(vhosts: Vhosts, to_tenant: bool) -> None:
    gateway = vhosts.to_tenant if to_tenant else vhosts.plain
    mapping = aliases(vhosts, to_tenant)
    queues = {namespace: unique("q") for namespace in mapping}
    for namespace, names in mapping.items():
        declaring = connect(gateway.port, names[0])
        declaring.channel().queue_declare(queues[namespace])
        declaring.close()
        for vhost in names:
            connection = connect(gateway.port, vhost)
            for other, queue in queues.items():
                if other == namespace:
                    ok = connection.channel().queue_declare(queue, passive=True)
                    assert ok.method.queue == queue, vhost
                else:
                    # Another namespace's queue is not visible here. (The text names the
                    # vhost by the alias that opened the namespace first, so only the code
                    # and the queue are checked.)
                    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
                        connection.channel().queue_declare(queue, passive=True)
                    assert closed.value.reply_code == 404, vhost
                    assert f"no queue '{queue}'" in closed.value.reply_text
            connection.close()
    for namespace, names in mapping.items():
        connection = connect(gateway.port, names[0])
        connection.channel().queue_delete(queues[namespace])
        connection.close()


@pytest.mark.parametrize("vhosts", [PULSAR_ONLY], indirect=True)
@pytest.mark.parametrize("to_tenant", [False, True], ids=["short-to-namespace", "short-to-tenant"])
def test_messages_land_in_the_mapped_namespace(vhosts: Vhosts, to_tenant: bool) -> None:
    """Published through each vhost, read back by a native Pulsar reader on the topic of the
    namespace the mapping names (the default exchange's ``amq.default__<queue>``)."""
    gateway = vhosts.to_tenant if to_tenant else vhosts.plain
    client = pulsar.Client(vhosts.broker_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        for namespace, names in aliases(vhosts, to_tenant).items():
            for vhost in names:
                queue = unique("landing")
                connection = connect(gateway.port, vhost)
                channel = connection.channel()
                channel.queue_declare(queue)
                channel.confirm_delivery()
                channel.basic_publish("", queue, f"via {vhost!r}".encode())
                connection.close()
                topic = f"persistent://{namespace}/amq.default__{queue}"
                reader = client.create_reader(topic, pulsar.MessageId.earliest)
                try:
                    message = reader.read_next(timeout_millis=10_000)
                finally:
                    reader.close()
                assert message.data() == f"via {vhost!r}".encode(), (vhost, namespace)
    finally:
        client.close()


@pytest.mark.parametrize(
    "vhost",
    ["/a/b/c", "a/b/c", "/a/b/", "//", "/x/", "a//b", "/café", "/a b", "/100%", "/..", "/t/."],
)
def test_vhosts_pulsar_cannot_name_are_530(vhosts: Vhosts, vhost: str) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
        connect(vhosts.plain.port, vhost)
    text = str(refused.value)
    assert "(530)" in text and f"NOT_ALLOWED - vhost {vhost} not found" in text, text
    connect(vhosts.plain.port, "/").close()  # the gateway still serves


@pytest.mark.parametrize("vhosts", [PULSAR_ONLY], indirect=True)
@pytest.mark.parametrize("which", ["namespace", "tenant"])
def test_vhost_without_a_namespace_is_530(vhosts: Vhosts, which: str) -> None:
    missing = unique("missing")
    vhost = f"/{missing}" if which == "namespace" else f"/{missing}/ns"
    namespace = f"{vhosts.tenant}/{missing}" if which == "namespace" else f"{missing}/ns"
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
        connect(vhosts.plain.port, vhost)
    text = str(refused.value)
    assert "(530)" in text and f"NOT_ALLOWED - vhost {vhost} not found" in text, text
    assert namespace in text, text
