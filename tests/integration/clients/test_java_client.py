"""RabbitMQ's Java client (``com.rabbitmq:amqp-client`` 5.x) against the gateway, for what the
Java world relies on: ConnectionFactory's defaults and heartbeats, publisher confirms
(waitForConfirmsOrDie and a ConfirmListener), every property and header type, DefaultConsumer
with manual acks and prefetch (per consumer and global), basicGet, transactions,
basicReject/basicNack/basicRecover, mandatory publishes and the ReturnListener, the four
exchange types, exclusive consumers and cancel notifications, RpcServer/RpcClient, queue
lifetimes, the everyday 403/404/405/406 closes as ShutdownSignalExceptions, automatic
connection recovery with topology recovery, the BlockedListener, and unacknowledged deliveries
coming back when a channel or connection ends (issue 12, "wrong today" 5). docs/compatibility.md,
"The Java client", lists what each checks.

Why this shape: the scenarios are one plain ``main`` (tests/java_client/, Scenarios.java) that
pytest starts once per scenario against a gateway the usual fixtures started, not JUnit tests
run by Surefire. The gateway, its Pulsar namespace and the actions a scenario needs on the
gateway's side (close or drop the client's connection, restart the gateway, release a held
publish) all live here, in Python, where the other integration tests already have them; a
scenario asks for such an action with a ``WAIT`` line and goes on when answered. The Java side
only drives the client and prints what it saw (``FACT key=value``); the expectations — RabbitMQ's
documented behaviour — are asserted here, so a failure reads like every other test's. No test
framework is fetched: Maven resolves the client alone (3.7 MB with Netty) into ~/.m2, once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from gateway.amqp.errors import AMQPError, ReplyCode
from gateway.app import server_settings
from gateway.backend.interface import Message, PublishOutcome, VirtualHost
from gateway.backend.memory import MemoryBackend
from gateway.config import GatewayConfig
from gateway.model.arguments import NOT_IMPLEMENTED
from gateway.server.address import Listener
from gateway.server.server import SHUTDOWN_TEXT
from gateway.server.settings import ServerSettings
from gateway.server.stall_watch import REASON as BLOCKED_REASON
from tests.support.clients import unique
from tests.support.gateway_thread import GatewayInThread
from tests.support.java_client import classpath, run_scenario
from tests.support.pulsar_gateway import backend_factory, fresh_namespace, stack_config

pytestmark = pytest.mark.integration

# Queue arguments RabbitMQ acts on, with a valid value each: those the gateway does not
# implement must be refused with 406 naming them (docs/compatibility.md), never ignored.
QUEUE_ARGUMENTS = {
    "x-max-priority": "int:10",
    "x-message-ttl": "int:1000",
    "x-expires": "int:60000",
    "x-max-length": "int:10",
    "x-dead-letter-exchange": "str:dlx",
    "x-single-active-consumer": "bool:true",
}


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def java() -> str:
    """The scenarios' classpath (compiled by Maven the first time)."""
    return classpath()


def loopback(config: GatewayConfig, port: int = 0) -> ServerSettings:
    """The configuration's settings (its Connection.Tune values), on a loopback port."""
    return dataclasses.replace(
        server_settings(config), listeners=(Listener("amqp", "127.0.0.1", port),)
    )


@pytest.fixture(scope="module")
def pulsar_config(pulsar_stack: Any) -> Iterator[GatewayConfig]:
    with fresh_namespace(pulsar_stack) as namespace:
        yield stack_config(
            pulsar_stack.web_url, pulsar_stack.broker_url, pulsar_stack.zookeeper, namespace
        )


@pytest.fixture(scope="module")
def gateway(pulsar_config: GatewayConfig) -> Iterator[GatewayInThread]:
    """One gateway on Pulsar for the module's scenarios (each uses names of its own)."""
    with GatewayInThread(
        loopback(pulsar_config), backend_factory=backend_factory(pulsar_config)
    ) as running:
        yield running


def facts_of(java: str, scenario: str, gateway: GatewayInThread, *arguments: str) -> dict[str, str]:
    return run_scenario(java, scenario, gateway.port, *arguments)


# --------------------------------------------------------------------------- connection


def test_connection_factory_defaults(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "connection_defaults", gateway)
    tuning = gateway.settings.connection
    # ConnectionFactory asks for heartbeat 60, frame_max 0 (no limit), channel_max 2047; each
    # side's 0 means "no limit", otherwise the lower value wins (AMQP 0-9-1, Connection.Tune).
    assert tuning.heartbeat == 0
    assert facts["heartbeat"] == "60"
    assert facts["frame_max"] == str(tuning.frame_max)
    assert facts["channel_max"] == str(min(2047, tuning.channel_max))
    assert facts["highest_channel_open"] == "true"
    assert facts["product"] == tuning.product == "RabbitMQ"
    assert facts["version"] == tuning.version
    assert facts["capabilities"].split(",") == sorted(
        [
            "authentication_failure_close",
            "basic.nack",
            "connection.blocked",
            "consumer_cancel_notify",
            "consumer_priorities",
            "direct_reply_to",
            "exchange_exchange_bindings",
            "per_consumer_qos",
            "publisher_confirms",
        ]
    )
    assert facts["server_named"] == "true"
    assert facts["large_body_equal"] == "true"


# --------------------------------------------------------------------------- publishing


def test_wait_for_confirms_or_die(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "confirms_wait", gateway)
    assert facts == {"confirmed": "true", "next_publish_seq_no": "101", "message_count": "100"}


def test_async_confirm_listener(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "confirms_async", gateway)
    assert facts["acked"] == "500"
    assert facts["nacked"] == "0"
    assert facts["ack_tags_increasing"] == "true"
    assert facts["last_ack_tag"] == "500"
    assert facts["received"] == "500"


def test_mandatory_publish_and_return_listener(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "mandatory_return", gateway)
    exchange = facts["exchange"]
    # Basic.Return (312 NO_ROUTE) before the Basic.Ack of the same publish; a routed or a
    # non-mandatory publish is only acked.
    assert facts["events"].split("|") == [
        "return:312:NO_ROUTE::jc.nowhere:lost",
        "ack:1",
        f"return:312:NO_ROUTE:{exchange}:k:unbound",
        "ack:2",
        "ack:3",
        "ack:4",
    ]
    assert facts["routed"] == "routed"


# --------------------------------------------------------------------------- consuming


def test_default_consumer_manual_ack_and_prefetch(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "consumer_prefetch", gateway)
    assert facts == {
        "consume_ok_tag_matches": "true",
        "max_unacked": "5",
        "delivered": "20",
        "distinct": "20",
        "tags_sequential": "true",
        "any_redelivered": "false",
        "in_order": "true",
        "left_in_queue": "0",
    }


def test_exclusive_consumer_and_cancel_notification(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "exclusive_consumer_and_cancel", gateway)
    assert facts["second_consumer.code"] == "403"
    assert facts["second_consumer.text"] == (
        f"ACCESS_REFUSED - queue '{facts['queue']}' in vhost '/' in exclusive use"
    )
    assert facts["second_consumer.hard"] == "false"
    # Deleting the queue cancels its consumer with Basic.Cancel; the channel stays open.
    assert facts["cancel_notified"] == "true"
    assert facts["channel_open"] == "true"


@pytest.mark.parametrize("reply_to", ["queue", "direct"])
def test_rpc_client_and_server(java: str, gateway: GatewayInThread, reply_to: str) -> None:
    # "direct": RpcClient with amq.rabbitmq.reply-to (direct reply-to), its default.
    facts = facts_of(java, "rpc", gateway, reply_to)
    assert facts["replies"] == "pong:ping0,pong:ping1,pong:ping2"
    assert facts["server_stopped"] == "true"


def test_properties_and_header_types_round_trip(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "properties", gateway)
    assert facts["back"] == facts["sent"]
    # RabbitMQ's validated user-id: only the connection's own user (guest here) may be named.
    assert facts["other_user_id.code"] == "406"
    assert facts["other_user_id.text"] == (
        "PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated user was 'guest'"
    )
    assert facts["other_user_id.hard"] == "false"
    assert facts["stored_after_refusal"] == "false"


def test_global_qos_is_shared_by_the_channels_consumers(
    java: str, gateway: GatewayInThread
) -> None:
    facts = facts_of(java, "global_qos", gateway)
    assert facts == {"delivered": "10", "max_unacked": "3"}


def test_auto_delete_and_exclusive_queue_lifetimes(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "lifetimes", gateway)
    assert facts == {
        "auto_delete_kept_while_consumed": "true",
        "auto_delete_gone_after_cancel": "true",
        "exclusive_kept_while_connected": "true",
        "exclusive_gone_after_close": "true",
    }


def test_client_heartbeats_keep_an_idle_connection_open(
    java: str, gateway: GatewayInThread
) -> None:
    facts = facts_of(java, "heartbeats", gateway)
    assert facts == {"heartbeat": "1", "open_after_idle": "true", "usable_after_idle": "true"}


def test_counts_follow_the_channels_order(java: str, gateway: GatewayInThread) -> None:
    """Publishes not yet confirmed are counted by a later declare and removed by a later purge
    on the same channel (the gateway waits for its own writes to the queue's topics first)."""
    facts = facts_of(java, "counts_in_channel_order", gateway)
    assert facts == {"declare_count": "3", "purged": "4", "after_purge": "empty"}


def test_basic_get(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "basic_get", gateway)
    for number, remaining in ((1, 2), (2, 1), (3, 0)):
        assert facts[f"get{number}.body"] == f"m{number}"
        assert facts[f"get{number}.message_count"] == str(remaining)
        assert facts[f"get{number}.redelivered"] == "false"
    assert facts["empty_get_is_null"] == "true"


def test_reject_and_nack_requeue_redelivered(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "reject_nack_requeue", gateway)
    assert facts["first"] == "a:false"
    assert facts["after_reject"] == "{a=true, b=false}"
    assert facts["after_nack_multiple"] == "{a=true, b=true}"
    assert facts["empty_after_drop"] == "true"
    assert facts["message_count"] == "0"


def test_priority_queue(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "priority_queue", gateway)
    # Priorities {null,1,5,10,5,null,3,10,1,0,7,3} for m0..m11: highest first, FIFO within,
    # null as 0 (docs/compatibility.md, "Priority queues").
    assert facts["top_by_get"] == "m3"
    assert facts["consumed"] == "m7,m10,m2,m4,m6,m11,m1,m8,m0,m5,m9"
    assert facts["long_redeclare"] == "equivalent"  # Integer 10 and Long 10: one value
    assert facts["other_redeclare.code"] == "406"
    assert facts["other_redeclare.text"] == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-priority' for queue '{facts['queue']}' "
        "in vhost '/': received '5' but current is '10'"
    )


def test_transactions(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "transactions", gateway)
    assert facts["before_commit_count"] == "0"
    assert facts["committed"] == "t1,t2"  # the rolled-back publish is not among them
    assert facts["after_rollback_get_is_null"] == "true"  # acks rolled back: not requeued
    assert facts["after_commit_get_is_null"] == "true"
    assert facts["commit_without_select.code"] == "406"
    assert facts["commit_without_select.text"] == (
        "PRECONDITION_FAILED - channel is not transactional"
    )
    assert facts["commit_without_select.hard"] == "false"
    assert facts["select_on_confirm.code"] == "406"
    assert facts["select_on_confirm.text"] == (
        "PRECONDITION_FAILED - cannot switch from confirm to tx mode"
    )


def test_streams(java: str, gateway: GatewayInThread) -> None:
    """basicQos + basicConsume with x-stream-offset, as RabbitMQ's streams page shows it."""
    facts = facts_of(java, "streams", gateway)
    first = facts["first"].strip("[]").split(", ")
    assert [entry.split("@")[0] for entry in first] == ["m1", "m2", "m3", "m4", "m5"]
    offsets = [int(entry.split("@")[1]) for entry in first]
    assert offsets == sorted(offsets)
    assert facts["offset_class"] == "Long"
    assert facts["resumed"] == "[" + ", ".join(first[3:5]) + "]"
    assert facts["since_an_hour_ago"] == "5"
    assert facts["again_after_acks"] == "true"
    assert facts["auto_ack.code"] == "540"
    assert facts["auto_ack.text"].startswith(
        "NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queue 'jc.stream"
    )
    assert facts["auto_ack.hard"] == "true"


def test_basic_recover(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "recover", gateway)
    assert facts["redelivered"] == "m1:true,m2:true,m3:true"
    # rabbit_channel: basic.recover with requeue=false is a connection error.
    assert facts["recover_without_requeue.code"] == "540"
    assert facts["recover_without_requeue.text"] == "NOT_IMPLEMENTED - requeue=false"
    assert facts["recover_without_requeue.hard"] == "true"
    assert facts["connection_open"] == "false"


def test_exchange_types(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "exchange_types", gateway)
    assert facts == {
        "direct.q1": "red",
        "direct.q2": "green,red",
        "fanout.q1": "f1",
        "fanout.q2": "f1",
        "topic.q1": "a.b,a.z",  # a.*
        "topic.q2": "a.b.z,a.z,z",  # #.z
        "headers.q1": "both",  # x-match all
        "headers.q2": "both,color,size",  # x-match any
    }


def test_exchange_bindings(java: str, gateway: GatewayInThread) -> None:
    """exchangeBind/exchangeUnbind as RabbitMQ's e2e page has them, and topology recovery
    declaring the exchange bindings again after the gateway closed the connection."""
    facts = run_scenario(
        java,
        "exchange_bindings",
        gateway.port,
        on_wait={"break-connection": lambda: close_connections(gateway)},
    )
    source = facts["returned"].split(" ", 1)[1]
    assert facts == {
        "through": "audit,created",  # once each, through the chain and the cycle
        "after_unbind": "audit-2",
        "returned": f"312 {source}",
        "missing_source.code": "404",
        "missing_source.text": (
            f"NOT_FOUND - no exchange '{source.removesuffix('.source')}.missing' in vhost '/'"
        ),
        "missing_source.hard": "false",
        "default_destination.code": "403",
        "default_destination.text": (
            "ACCESS_REFUSED - operation not permitted on the default exchange"
        ),
        "default_destination.hard": "false",
        "after_recovery": "recovered",
    }


def test_one_message_routed_to_two_queues_is_settled_per_queue(
    java: str, gateway: GatewayInThread
) -> None:
    """Both queues read the exchange's one Pulsar topic: the gateway marks redeliveries per
    queue (it once marked the second queue's first delivery redelivered, and lost the mark of
    a requeued copy once the other queue acknowledged its own)."""
    facts = facts_of(java, "one_message_two_queues", gateway)
    assert facts == {
        "first": "false,false",
        "q2_again": "x:true",
        "q1_empty": "true",
        "q2_empty": "true",
    }


# --------------------------------------------------------------------------- errors


def test_missing_entities_are_404_channel_errors(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "missing_entities", gateway)
    name = facts["queue"]
    assert facts["queue_passive.code"] == "404"
    assert facts["queue_passive.text"] == f"NOT_FOUND - no queue '{name}' in vhost '/'"
    assert facts["queue_passive.hard"] == "false"
    assert facts["channel_open"] == "false"
    assert facts["connection_open"] == "true"
    assert facts["exchange_passive.code"] == "404"
    assert facts["exchange_passive.text"] == f"NOT_FOUND - no exchange '{name}' in vhost '/'"
    assert facts["consume.code"] == "404"
    assert facts["consume.text"] == f"NOT_FOUND - no queue '{name}' in vhost '/'"
    assert facts["connection_still_open"] == "true"


def test_everyday_errors_in_rabbitmqs_words(java: str, gateway: GatewayInThread) -> None:
    facts = facts_of(java, "errors", gateway)
    queue = f"queue '{facts['queue']}' in vhost '/'"
    expected = {
        "publish_to_missing_exchange": (
            404,
            f"NOT_FOUND - no exchange '{facts['queue']}' in vhost '/'",
        ),
        "inequivalent_durable": (
            406,
            f"PRECONDITION_FAILED - inequivalent arg 'durable' for {queue}: received 'true' "
            "but current is 'false'",
        ),
        "unknown_delivery_tag": (406, "PRECONDITION_FAILED - unknown delivery tag 99"),
        "delete_if_unused": (406, f"PRECONDITION_FAILED - {queue} in use"),
        "delete_if_empty": (406, f"PRECONDITION_FAILED - {queue} not empty"),
        "reserved_exchange_name": (
            403,
            "ACCESS_REFUSED - exchange name 'amq.jc' contains reserved prefix 'amq.*'",
        ),
        # 3.x answered 503 COMMAND_INVALID, a connection error; 4.x (rabbit_exchange:check_type)
        # a channel error.
        "unknown_exchange_type": (
            406,
            "PRECONDITION_FAILED - unknown exchange type 'no-such-type'",
        ),
        "delete_if_empty_unconfirmed": (406, f"PRECONDITION_FAILED - {queue} not empty"),
        # Connection errors: RabbitMQ implements neither.
        "immediate_publish": (540, "NOT_IMPLEMENTED - immediate=true"),
        "qos_prefetch_size": (540, "NOT_IMPLEMENTED - prefetch_size!=0 (4096)"),
    }
    for name, (code, text) in expected.items():
        hard = code >= 500
        assert (facts[f"{name}.code"], facts[f"{name}.text"]) == (str(code), text), name
        assert facts[f"{name}.hard"] == str(hard).lower(), name
        assert facts[f"{name}.connection_open"] == str(not hard).lower(), name


def test_exclusive_queue_from_another_connection_is_405(
    java: str, gateway: GatewayInThread
) -> None:
    facts = facts_of(java, "exclusive_queue", gateway)
    locked = (
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{facts['queue']}'"
        " in vhost '/'. It could be originally declared on another connection or the exclusive"
        " property value does not match that of the original declaration."
    )
    for attempt in ("declare", "passive", "consume", "purge", "delete", "get"):
        assert facts[f"{attempt}.code"] == "405", attempt
        assert facts[f"{attempt}.text"] == locked, attempt
        assert facts[f"{attempt}.hard"] == "false", attempt
    assert facts["owner_still_uses_it"] == "true"


def test_refused_arguments_are_406_naming_them(java: str, gateway: GatewayInThread) -> None:
    refused = [
        f"queue:{name}={value}"
        for name, value in QUEUE_ARGUMENTS.items()
        if name in NOT_IMPLEMENTED
    ]
    # RabbitMQ's own checks: x-priority must be an integer (consumer priorities are
    # implemented: docs/compatibility.md, "Consumer priorities").
    specs = [*refused, "queue:x-max-length=int:-1", "consume:x-priority=str:high"]
    facts = facts_of(java, "refused_arguments", gateway, *specs)
    for spec in specs:
        target, _, rest = spec.partition(":")
        name = rest.partition("=")[0]
        key = f"{target}.{name}"
        where = f"invalid arg '{name}' for queue '{facts[key + '.queue']}' in vhost '/'"
        assert facts[f"{key}.code"] == "406", spec
        assert facts[f"{key}.text"].startswith(f"PRECONDITION_FAILED - {where}: "), spec
        assert facts[f"{key}.hard"] == "false", spec
    # RabbitMQ's own validation, whatever is implemented.
    assert facts["queue.x-max-length.text"].endswith(": {value_negative,-1}")
    assert facts["consume.x-priority.text"].endswith(': "expected integer, got longstr"')
    assert facts["connection_open"] == "true"


# --------------------------------------------------------------------------- recovery


FORCED_TEXT = "CONNECTION_FORCED - closed by the test"


def close_connections(gateway: GatewayInThread) -> None:
    """Connection.Close 320 to every client, as RabbitMQ's management "close connection"."""
    for connection in gateway.server.connections:
        gateway.call_async(
            connection.request_close, AMQPError(ReplyCode.CONNECTION_FORCED, FORCED_TEXT)
        )


def drop_connections(gateway: GatewayInThread) -> None:
    """End every client's TCP connection from the gateway's side, without Connection.Close."""

    def drop() -> None:
        for connection in gateway.server.connections:
            connection.nursery.cancel_scope.cancel()

    gateway.call(drop)


def check_recovered(facts: dict[str, str]) -> None:
    assert facts["held_first"] == "before:false"
    assert facts["recovered"] == "1"
    # A server-named queue comes back under a new name (the client declares it again).
    assert facts["queue_renamed"] == "true"
    # The durable queue's unacknowledged message comes back to the recovered consumer,
    # marked redelivered, as on RabbitMQ: also from another replica than the one that
    # delivered it (its delivery record: docs/fleet.md).
    assert facts["held_again"] == "before:true"
    # Exchange, queues, bindings and consumers were all declared again.
    assert facts["both_after"] == "true"
    assert facts["transient_bodies"] == "before,after"
    assert facts["durable_bodies"] == "before,before,after"


@pytest.mark.parametrize("how", ["closed", "dropped"])
def test_automatic_recovery_with_topology(java: str, gateway: GatewayInThread, how: str) -> None:
    action = close_connections if how == "closed" else drop_connections
    facts = run_scenario(
        java, "recovery", gateway.port, on_wait={"break-connection": lambda: action(gateway)}
    )
    check_recovered(facts)
    if how == "closed":
        assert facts["shutdown"] == f"320 {FORCED_TEXT}"
    else:
        assert facts["shutdown"].startswith("lost")


def test_automatic_recovery_across_a_gateway_restart(
    java: str, pulsar_config: GatewayConfig
) -> None:
    """Stop the gateway (it closes its connections with 320, as a RabbitMQ node that stops)
    and start another on the same port and namespace: the client recovers onto it."""
    first = GatewayInThread(
        loopback(pulsar_config), backend_factory=backend_factory(pulsar_config)
    ).start()
    port = first.port
    replacement: list[GatewayInThread] = []

    def restart() -> None:
        first.stop()
        replacement.append(
            GatewayInThread(
                loopback(pulsar_config, port), backend_factory=backend_factory(pulsar_config)
            ).start()
        )

    try:
        facts = run_scenario(java, "recovery", port, on_wait={"break-connection": restart})
    finally:
        first.stop()
        for gateway in replacement:
            gateway.stop()
    check_recovered(facts)
    assert facts["shutdown"] == f"320 {SHUTDOWN_TEXT}"


def test_automatic_recovery_fails_over_to_another_replica(
    java: str, pulsar_config: GatewayConfig
) -> None:
    """Two replicas on one namespace, both in the client's address list: stopping the one it
    is connected to, the client recovers onto the other, topology and consumers included."""
    replicas = [
        GatewayInThread(loopback(pulsar_config), backend_factory=backend_factory(pulsar_config))
        for _ in range(2)
    ]
    for replica in replicas:
        replica.start()

    def stop_the_connected_one() -> None:
        (connected,) = [r for r in replicas if r.call(lambda r=r: len(r.server.connections))]
        connected.stop()

    try:
        facts = run_scenario(
            java,
            "recovery",
            replicas[0].port,
            str(replicas[1].port),
            on_wait={"break-connection": stop_the_connected_one},
        )
    finally:
        for replica in replicas:
            replica.stop()
    check_recovered(facts)
    assert facts["shutdown"] == f"320 {SHUTDOWN_TEXT}"


# --------------------------------------------------------------------------- blocked


class HeldVirtualHost:
    """A vhost whose publishes to queues named ``held-…`` wait until ``release`` is set: a
    message store that does not keep up, as Pulsar at its in-flight limit."""

    def __init__(self, inner: VirtualHost, release: trio.Event) -> None:
        self._inner = inner
        self._release = release

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def publish(self, message: Message, *, mandatory: bool = False) -> PublishOutcome:
        if message.routing_key.startswith("held-"):
            await self._release.wait()
        return await self._inner.publish(message, mandatory=mandatory)

    def publish_now(self, message: Message, *, mandatory: bool = False) -> PublishOutcome | None:
        if message.routing_key.startswith("held-"):
            return None  # through publish(), which holds it
        return self._inner.publish_now(message, mandatory=mandatory)


class HoldingBackend(MemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.release = trio.Event()

    async def open_vhost(self, vhost: str, user: str) -> Any:
        return HeldVirtualHost(await super().open_vhost(vhost, user), self.release)


def test_blocked_listener(java: str) -> None:
    backend = HoldingBackend()
    with GatewayInThread(backend=backend) as held:
        facts = run_scenario(
            java,
            "blocked",
            held.port,
            unique("held"),
            on_wait={"release": lambda: held.call(backend.release.set)},
        )
    assert facts["events"] == f"blocked:{BLOCKED_REASON}|unblocked"
    assert facts["delivered"] == "held"


# --------------------------------------------------------------------------- settlement


def test_unacknowledged_deliveries_come_back_when_a_channel_or_connection_ends(
    java: str, gateway: GatewayInThread
) -> None:
    """Issue 12, "wrong today" 5: 18 permutations of prefetch (0, 1, 3), ending (channel
    close, connection close, TCP connection lost) and a cancel before it, each with a rotating
    mix of a partial ack, a no-ack consumer on the same channel and a Basic.Get held. Each
    reports what came back (``m<i>:redelivered`` or ``:first``, within the scenario's
    deadline, so "promptly": not after a redelivery delay) and what should have."""
    facts = run_scenario(java, "settle_on_close", gateway.port)
    permutations = {key: value for key, value in facts.items() if key.startswith("perm.")}
    assert len(permutations) == 18
    wrong = {}
    for name, outcome in permutations.items():
        back, _, expected = outcome.partition("|")
        if back != expected:
            wrong[name] = f"back {back!r}, expected {expected!r}"
    assert not wrong, wrong
