"""Authorization seen by a real client (pika): the vhost check at Connection.Open, and every
operation allowed with exactly the access RabbitMQ's table asks for and refused (403, with
RabbitMQ's text) without it. Once over the memory backend with the memory permission store,
once over the Pulsar backend with permissions in ZooKeeper, changed from outside the gateway
(another ZooKeeper session, or the ``permissions`` command) while clients stay connected.

The principal is the PLAIN username (the gateway's AcceptAnyone authenticator passes it on).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
import trio
from pika.adapters.blocking_connection import BlockingChannel

from gateway.app import pulsar_backend
from gateway.auth.authorization import AuthorizingBackend
from gateway.auth.permissions_cli import run_permissions_command
from gateway.backend.interface import Backend
from gateway.backend.memory import MemoryBackend
from gateway.metadata.permissions import (
    Access,
    MemoryPermissionStore,
    Permissions,
    PermissionStore,
    ZooKeeperPermissionStore,
    serving_permissions,
)
from gateway.model.vhost import VhostMapper
from tests.support.clients import channel_closed, connect, unique, wait_for
from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_gateway import fresh_namespace, stack_config
from tests.support.zookeeper import delete_tree, unique_prefix

ADMIN = "admin"  # in superUserRoles
Need = tuple[Access, str, str]  # access, resource kind, name (a key of Names or a literal)


@dataclass
class Authz:
    """A running gateway with authorization, and a way to change permissions from outside."""

    gateway: GatewayInThread
    kind: str  # "memory" or "pulsar"
    scope: str  # the permission key of vhost "/"
    store_holder: dict[str, PermissionStore] = field(default_factory=dict)
    zookeeper: str = ""
    prefix: str = ""
    config_file: Path | None = None

    @property
    def store(self) -> PermissionStore:
        return self.store_holder["store"]

    def connect(self, user: str, vhost: str = "/") -> pika.BlockingConnection:
        return connect(self.gateway.port, vhost, credentials=pika.PlainCredentials(user, "ignored"))

    def _seen(self, user: str, expected: Permissions | None) -> bool:
        return bool(self.gateway.call(lambda: self.store.lookup(self.scope, user) == expected))

    def grant(self, user: str, permissions: Permissions) -> None:
        self._change(user, permissions)

    def revoke(self, user: str) -> None:
        self._change(user, None)

    def _change(self, user: str, permissions: Permissions | None) -> None:
        if self.kind == "memory":
            store = self.store
            assert isinstance(store, MemoryPermissionStore)
            if permissions is None:
                self.gateway.call(store.remove, self.scope, user)
            else:
                self.gateway.call(store.put, self.scope, user, permissions)
            return
        trio.run(self._write_zookeeper, user, permissions)
        # Another session wrote it: wait until the gateway's watch has brought it in.
        wait_for(lambda: self._seen(user, permissions), what=f"permissions of {user}")

    async def _write_zookeeper(self, user: str, permissions: Permissions | None) -> None:
        async with ZooKeeperPermissionStore(self.zookeeper, prefix=self.prefix) as store:
            if permissions is None:
                await store.clear(self.scope, user)
            else:
                await store.set(self.scope, user, *(permissions.pattern(a) for a in Access))


def _authorizing(inner: Backend, store: PermissionStore, mapper: VhostMapper) -> Backend:
    return AuthorizingBackend(inner, store, superusers=[ADMIN], mapper=mapper)


@pytest.fixture(
    scope="module", params=["memory", pytest.param("pulsar", marks=pytest.mark.integration)]
)
def authz(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Authz]:
    if request.param == "memory":
        store = MemoryPermissionStore()
        backend = _authorizing(MemoryBackend(), store, VhostMapper())
        with GatewayInThread(backend=backend) as gateway:
            yield Authz(gateway, "memory", "public/default", {"store": store})
        return
    stack = request.getfixturevalue("pulsar_stack")
    prefix = unique_prefix()
    holder: dict[str, PermissionStore] = {}
    with fresh_namespace(stack) as namespace:
        config = stack_config(stack.web_url, stack.broker_url, stack.zookeeper, namespace)
        config_file = tmp_path_factory.mktemp("authz") / "gateway.conf"
        config_file.write_text(
            f"configurationStoreServers={stack.zookeeper}\n"
            f"brokerServiceURL={stack.broker_url}\n"
            f"brokerWebServiceURL={stack.web_url}\n"
            f"amqpDefaultNamespace={namespace}\n",
            encoding="utf-8",
        )

        @asynccontextmanager
        async def factory() -> AsyncIterator[Backend]:
            store = ZooKeeperPermissionStore(stack.zookeeper, prefix=prefix)
            async with pulsar_backend(config) as inner, serving_permissions(store):
                holder["store"] = store
                yield _authorizing(inner, store, VhostMapper("public", namespace))

        try:
            with GatewayInThread(backend_factory=factory) as gateway:
                yield Authz(
                    gateway,
                    "pulsar",
                    f"public/{namespace}",
                    holder,
                    stack.zookeeper,
                    prefix,
                    config_file,
                )
        finally:
            delete_tree(stack.zookeeper, prefix)


@pytest.fixture(scope="module")
def admin(authz: Authz) -> Iterator[pika.BlockingConnection]:
    connection = authz.connect(ADMIN)
    yield connection
    connection.close()


# ------------------------------------------------------------------------------ the world


@dataclass
class Names:
    """Entities of one test: x (an exchange), y (an exchange bound to x with key k), q (a
    queue bound to x with key k, holding one message), and names not yet used."""

    x: str = field(default_factory=lambda: unique("x"))
    y: str = field(default_factory=lambda: unique("y"))
    q: str = field(default_factory=lambda: unique("q"))
    new_x: str = field(default_factory=lambda: unique("new-x"))
    new_q: str = field(default_factory=lambda: unique("new-q"))
    user: str = field(default_factory=lambda: unique("user"))

    def name(self, key: str) -> str:
        return str(getattr(self, key, key))


def _world(admin: pika.BlockingConnection) -> Names:
    names = Names()
    channel = admin.channel()
    channel.confirm_delivery()
    channel.exchange_declare(names.x, "direct")
    channel.exchange_declare(names.y, "fanout")
    channel.exchange_bind(names.y, names.x, "k")
    channel.queue_declare(names.q)
    channel.queue_bind(names.q, names.x, "k")
    channel.basic_publish("", names.q, b"waiting", mandatory=True)
    channel.close()
    return names


def _grant(names: Names, needs: list[Need]) -> Permissions:
    def pattern(access: Access) -> str:
        chosen = [re.escape(names.name(key)) for a, _, key in needs if a is access]
        return f"^({'|'.join(chosen)})$" if chosen else ""

    return Permissions(*(pattern(access) for access in Access))


def _refusal(names: Names, need: Need) -> str:
    access, kind, key = need
    return (
        f"ACCESS_REFUSED - {access} access to {kind} '{names.name(key)}' in vhost '/' "
        f"refused for user '{names.user}'"
    )


@dataclass(frozen=True)
class Case:
    id: str
    run: Callable[[BlockingChannel, Names], Any]
    needs: list[Need]
    # With every permission granted: refused anyway, 406 naming the argument the gateway does
    # not implement (docs/compatibility.md): (argument, entity kind, entity key in Names).
    not_implemented: tuple[str, str, str] | None = None


def _consume(channel: BlockingChannel, names: Names) -> None:
    tag = channel.basic_consume(names.q, lambda *_: None)
    channel.basic_cancel(tag)


def _publish(exchange: Callable[[Names], str], key: Callable[[Names], str]) -> Any:
    def run(channel: BlockingChannel, names: Names) -> None:
        channel.confirm_delivery()
        channel.basic_publish(exchange(names), key(names), b"m")

    return run


CASES = [
    Case(
        "exchange.declare",
        lambda ch, n: ch.exchange_declare(n.new_x, "fanout"),
        [(Access.CONFIGURE, "exchange", "new_x")],
    ),
    Case("exchange.declare passive", lambda ch, n: ch.exchange_declare(n.x, passive=True), []),
    Case(
        "exchange.declare with an alternate exchange",
        lambda ch, n: ch.exchange_declare(n.new_x, "fanout", arguments={"alternate-exchange": n.x}),
        [
            (Access.CONFIGURE, "exchange", "new_x"),
            (Access.READ, "exchange", "new_x"),
            (Access.WRITE, "exchange", "x"),
        ],
    ),
    Case(
        "exchange.delete",
        lambda ch, n: ch.exchange_delete(n.x),
        [(Access.CONFIGURE, "exchange", "x")],
    ),
    Case(
        "queue.declare",
        lambda ch, n: ch.queue_declare(n.new_q),
        [(Access.CONFIGURE, "queue", "new_q")],
    ),
    Case("queue.declare passive", lambda ch, n: ch.queue_declare(n.q, passive=True), []),
    Case(
        "queue.declare with a dead-letter exchange",
        lambda ch, n: ch.queue_declare(n.new_q, arguments={"x-dead-letter-exchange": n.x}),
        [
            (Access.CONFIGURE, "queue", "new_q"),
            (Access.READ, "queue", "new_q"),
            (Access.WRITE, "exchange", "x"),
        ],
    ),
    Case(
        "queue.delete",
        lambda ch, n: ch.queue_delete(n.q),
        [(Access.CONFIGURE, "queue", "q")],
    ),
    Case("queue.purge", lambda ch, n: ch.queue_purge(n.q), [(Access.READ, "queue", "q")]),
    Case(
        "queue.bind",
        lambda ch, n: ch.queue_bind(n.q, n.x, "k2"),
        [(Access.WRITE, "queue", "q"), (Access.READ, "exchange", "x")],
    ),
    Case(
        "queue.unbind",
        lambda ch, n: ch.queue_unbind(n.q, n.x, "k"),
        [(Access.WRITE, "queue", "q"), (Access.READ, "exchange", "x")],
    ),
    Case(
        "exchange.bind",
        lambda ch, n: ch.exchange_bind(n.y, n.x, "k2"),
        [(Access.WRITE, "exchange", "y"), (Access.READ, "exchange", "x")],
    ),
    Case(
        "exchange.unbind",
        lambda ch, n: ch.exchange_unbind(n.y, n.x, "k"),
        [(Access.WRITE, "exchange", "y"), (Access.READ, "exchange", "x")],
    ),
    Case(
        "basic.publish",
        _publish(lambda n: n.x, lambda n: "k"),
        [(Access.WRITE, "exchange", "x")],
    ),
    Case(
        "basic.publish to the default exchange",
        _publish(lambda n: "", lambda n: n.q),
        [(Access.WRITE, "exchange", "amq.default")],
    ),
    Case(
        # A direct reply (to a requester long gone: dropped) is a default-exchange publish.
        "basic.publish of a direct reply",
        _publish(lambda n: "", lambda n: "amq.rabbitmq.reply-to.gone.token"),
        [(Access.WRITE, "exchange", "amq.default")],
    ),
    Case("basic.consume", _consume, [(Access.READ, "queue", "q")]),
    Case("basic.get", lambda ch, n: ch.basic_get(n.q), [(Access.READ, "queue", "q")]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_operation_matrix(authz: Authz, admin: pika.BlockingConnection, case: Case) -> None:
    names = _world(admin)
    authz.grant(names.user, Permissions("", "", ""))
    connection = authz.connect(names.user)  # one connection throughout: changes apply live
    try:
        # Refusals first: they change nothing, so the allowed run still finds the world as
        # made (a refused Queue.Declare with a DLX must not have created the queue).
        for missing in case.needs:
            authz.grant(names.user, _grant(names, [n for n in case.needs if n != missing]))
            with channel_closed(403, _refusal(names, missing)):
                case.run(connection.channel(), names)
            assert connection.is_open  # a 403 closes the channel only
        authz.grant(names.user, _grant(names, case.needs))
        channel = connection.channel()
        if case.not_implemented is not None:
            argument, kind, key = case.not_implemented
            text = (
                f"PRECONDITION_FAILED - invalid arg '{argument}' for {kind} '{names.name(key)}' "
                "in vhost '/': not implemented by Starlight for RabbitMQ"
            )
            with channel_closed(406, text):
                case.run(channel, names)
            return
        case.run(channel, names)
        channel.close()
    finally:
        connection.close()


def test_exchange_bindings_of_the_default_exchange(
    authz: Authz, admin: pika.BlockingConnection
) -> None:
    """rabbit_channel's order: write on the destination (the default exchange as amq.default),
    then the default exchange refused at either end, then read on the source."""
    names = _world(admin)
    authz.grant(names.user, Permissions("", "", ""))
    connection = authz.connect(names.user)
    try:
        with channel_closed(403, _refusal(names, (Access.WRITE, "exchange", "amq.default"))):
            connection.channel().exchange_bind("", names.x, "k")
        authz.grant(names.user, Permissions("", ".*", ""))
        default = "ACCESS_REFUSED - operation not permitted on the default exchange"
        for destination, source in (("", names.x), (names.y, "")):
            with channel_closed(403, default):
                connection.channel().exchange_bind(destination, source, "k")
    finally:
        connection.close()


def test_server_named_queues_need_configure_on_amq_gen(
    authz: Authz, admin: pika.BlockingConnection
) -> None:
    user = unique("user")
    authz.grant(user, Permissions("^q-only$", "", ""))
    with authz.connect(user) as connection:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            connection.channel().queue_declare("", exclusive=True)
        assert refused.value.reply_code == 403
        assert re.fullmatch(
            rf"ACCESS_REFUSED - configure access to queue 'amq\.gen-[\w-]{{22}}' in vhost '/' "
            rf"refused for user '{user}'",
            refused.value.reply_text,
        ), refused.value.reply_text
        authz.grant(user, Permissions(r"^amq\.gen-", "", ""))
        declared = connection.channel().queue_declare("", exclusive=True)
        assert declared.method.queue.startswith("amq.gen-")


# ------------------------------------------------------------------------------ vhosts


def test_no_permissions_in_the_vhost_is_530(authz: Authz) -> None:
    user = unique("stranger")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
        authz.connect(user)
    text = str(refused.value)
    assert "(530)" in text, text
    assert f"NOT_ALLOWED - access to vhost '/' refused for user '{user}'" in text, text
    authz.grant(user, Permissions("", "", ""))  # any entry, even granting nothing, opens it
    authz.connect(user).close()
    authz.revoke(user)
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        authz.connect(user)


def test_permissions_in_another_vhost_do_not_count(authz: Authz) -> None:
    user = unique("elsewhere")
    other = Authz(authz.gateway, authz.kind, "public/other-vhost", authz.store_holder)
    other.zookeeper, other.prefix = authz.zookeeper, authz.prefix
    other.grant(user, Permissions.everything())
    try:
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            authz.connect(user)
    finally:
        other.revoke(user)


def test_superusers_need_no_permissions(authz: Authz, admin: pika.BlockingConnection) -> None:
    assert authz.gateway.call(lambda: authz.store.lookup(authz.scope, ADMIN)) is None
    names = _world(admin)  # the admin connection did everything _world does
    channel = admin.channel()
    assert channel.basic_get(names.q, auto_ack=True)[2] == b"waiting"
    channel.queue_delete(names.q)
    channel.exchange_delete(names.x)
    channel.close()


# ------------------------------------------------------------------------------ live changes


def test_changes_apply_to_open_connections(authz: Authz, admin: pika.BlockingConnection) -> None:
    names = _world(admin)
    authz.grant(names.user, Permissions("", ".*", ".*"))
    with authz.connect(names.user) as connection:
        publisher = connection.channel()
        publisher.confirm_delivery()
        publisher.basic_publish(names.x, "k", b"1")

        # An existing consumer keeps its messages when read is taken away (RabbitMQ checks
        # at Basic.Consume); new reads are refused.
        received: list[bytes] = []
        consumer = connection.channel()
        consumer.basic_consume(names.q, lambda ch, m, p, body: received.append(body), auto_ack=True)
        wait_for(lambda: len(received) == 2, connection, what="the two messages")
        authz.grant(names.user, Permissions("", ".*", ""))
        with channel_closed(403, _refusal(names, (Access.READ, "queue", "q"))):
            connection.channel().basic_get(names.q)
        publisher.basic_publish(names.x, "k", b"2")
        wait_for(lambda: len(received) == 3, connection, what="the message after the change")

        authz.grant(names.user, Permissions("", "", ""))
        with channel_closed(403, _refusal(names, (Access.WRITE, "exchange", "x"))):
            publisher.basic_publish(names.x, "k", b"3")

        # No entry at all: the connection stays (the vhost is checked at Connection.Open),
        # everything in it is refused.
        authz.revoke(names.user)
        with channel_closed(403, _refusal(names, (Access.WRITE, "exchange", "x"))):
            again = connection.channel()
            again.confirm_delivery()
            again.basic_publish(names.x, "k", b"4")
        assert connection.is_open
        authz.grant(names.user, Permissions("", ".*", ""))
        again = connection.channel()
        again.confirm_delivery()
        again.basic_publish(names.x, "k", b"5")
        wait_for(lambda: len(received) == 4, connection, what="the message after re-granting")
    # Pulsar keeps order per topic; the default exchange's and x's are two topics.
    assert sorted(received) == [b"1", b"2", b"5", b"waiting"]


# The command writes to ZooKeeper: only the Pulsar gateway reads permissions from there.
@pytest.mark.parametrize(
    "authz", [pytest.param("pulsar", marks=pytest.mark.integration)], indirect=True
)
def test_the_permissions_command_changes_a_live_gateway(
    authz: Authz, admin: pika.BlockingConnection
) -> None:
    assert authz.config_file is not None
    names = _world(admin)
    conf = ["-q", "-c", str(authz.config_file)]

    def command(*argv: str) -> None:
        action, *rest = argv
        assert run_permissions_command([action, *conf, *rest], prefix=authz.prefix) == 0

    read_q = f"^{re.escape(names.q)}$"
    command("set", names.user, "", "", read_q)
    wait_for(lambda: authz._seen(names.user, Permissions("", "", read_q)))
    with authz.connect(names.user) as connection:
        assert connection.channel().basic_get(names.q, auto_ack=True)[2] == b"waiting"
        command("clear", names.user)
        wait_for(lambda: authz._seen(names.user, None))
        with channel_closed(403, _refusal(names, (Access.READ, "queue", "q"))):
            connection.channel().basic_get(names.q)
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        authz.connect(names.user)
