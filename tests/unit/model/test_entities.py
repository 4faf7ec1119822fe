"""Entities and RabbitMQ's declare/delete/bind rules, with its exact reply texts."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.commands import QueueDeclare
from gateway.amqp.errors import ChannelError
from gateway.amqp.fieldtable import Field
from gateway.model.entities import (
    PREDECLARED_EXCHANGES,
    Binding,
    Exchange,
    ExchangeType,
    Queue,
    check_bind,
    check_equivalent,
    check_exchange_declare,
    check_exchange_delete,
    check_exclusive_access,
    check_name,
    check_queue_declare,
    declared_queue,
    not_found,
    queue_type_of,
    resource,
)

S = Field  # shorthand in tables


def error_text(call: object, *args: object, **kwargs: object) -> tuple[int, str]:
    assert callable(call)
    with pytest.raises(ChannelError) as caught:
        call(*args, **kwargs)
    assert not caught.value.is_hard  # every one of these closes only the channel
    return caught.value.reply_code, caught.value.reply_text


# -------------------------------------------------------------------------- exchange types


@pytest.mark.parametrize("name", ["direct", "fanout", "topic", "headers"])
def test_exchange_type_parse(name: str) -> None:
    assert ExchangeType.parse(name).value == name


@pytest.mark.parametrize("name", ["x-consistent-hash", "Direct", "", "x-delayed-message"])
def test_unknown_exchange_type_is_406(name: str) -> None:
    # rabbitmq-server#11214: a channel error, no longer 503 on the connection.
    assert error_text(ExchangeType.parse, name) == (
        406,
        f"PRECONDITION_FAILED - unknown exchange type '{name}'",
    )


def test_keyed_types() -> None:
    assert {t for t in ExchangeType if t.keyed} == {ExchangeType.DIRECT, ExchangeType.TOPIC}


def test_predeclared_exchanges() -> None:
    assert {(x.name, x.type) for x in PREDECLARED_EXCHANGES} == {
        ("", ExchangeType.DIRECT),
        ("amq.direct", ExchangeType.DIRECT),
        ("amq.fanout", ExchangeType.FANOUT),
        ("amq.topic", ExchangeType.TOPIC),
        ("amq.headers", ExchangeType.HEADERS),
        ("amq.match", ExchangeType.HEADERS),
    }
    for exchange in PREDECLARED_EXCHANGES:
        assert exchange.durable and not exchange.auto_delete and not exchange.internal
        assert not exchange.arguments


# ---------------------------------------------------------------------------- dataclasses


def test_entities_are_frozen_with_read_only_arguments() -> None:
    args = {"alternate-exchange": S("S", "ae")}
    exchange = Exchange("x", ExchangeType.DIRECT, arguments=args)
    args["alternate-exchange"] = S("S", "changed")  # the caller's dict is copied
    assert exchange.arguments["alternate-exchange"] == S("S", "ae")
    with pytest.raises(dataclasses.FrozenInstanceError):
        exchange.name = "y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        exchange.arguments["k"] = S("S", "v")  # type: ignore[index]


def test_bindings_hash_and_compare_with_arguments() -> None:
    a = Binding("q", "h", "", {"x-match": S("S", "any"), "k": S("I", 1)})
    b = Binding("q", "h", "", {"k": S("I", 1), "x-match": S("S", "any")})
    c = Binding("q", "h", "", {"x-match": S("S", "any"), "k": S("l", 1)})
    assert a == b and hash(a) == hash(b)
    assert a != c  # a different type is a different binding, as in RabbitMQ
    assert len({a, b, c}) == 2


def test_queue_owner_goes_with_exclusive() -> None:
    Queue("q", exclusive=True, owner="conn-1")
    Queue("q")
    with pytest.raises(ValueError):
        Queue("q", exclusive=True)
    with pytest.raises(ValueError):
        Queue("q", owner="conn-1")


def test_declared_queue_exclusive_is_owned_and_never_durable() -> None:
    queue = declared_queue(QueueDeclare("q", durable=True, exclusive=True), "c1")
    assert queue == Queue("q", durable=False, exclusive=True, owner="c1")
    shared = declared_queue(QueueDeclare("q", durable=True, auto_delete=True), "c1")
    assert shared == Queue("q", durable=True, auto_delete=True)


# ------------------------------------------------------------------------- name rules


def test_messages() -> None:
    assert resource("queue", "q", "/") == "queue 'q' in vhost '/'"
    assert not_found("exchange", "x", "/t/n").reply_text == (
        "NOT_FOUND - no exchange 'x' in vhost '/t/n'"
    )
    assert not_found("queue", "q", "/").reply_code == 404


def test_names_longer_than_a_shortstr_are_refused() -> None:
    check_name("queue", "\u00e9" * 127)  # 254 octets
    code, _ = error_text(check_name, "queue", "\u00e9" * 128)
    assert code == 406


@pytest.mark.parametrize("passive", [False, True])
def test_default_exchange_cannot_be_declared(passive: bool) -> None:
    assert error_text(check_exchange_declare, "", passive=passive, exists=True) == (
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )


def test_amq_prefix_only_refused_when_an_exchange_would_be_created() -> None:
    assert error_text(check_exchange_declare, "amq.custom", passive=False, exists=False) == (
        403,
        "ACCESS_REFUSED - exchange name 'amq.custom' contains reserved prefix 'amq.*'",
    )
    check_exchange_declare("amq.topic", passive=False, exists=True)  # redeclare: allowed
    check_exchange_declare("amq.custom", passive=True, exists=False)  # 404 comes later
    check_exchange_declare("amqx", passive=False, exists=False)
    check_exchange_declare("my.amq.x", passive=False, exists=False)


def test_amq_prefix_refused_for_client_named_queues() -> None:
    assert error_text(check_queue_declare, "amq.gen-abc", passive=False) == (
        403,
        "ACCESS_REFUSED - queue name 'amq.gen-abc' contains reserved prefix 'amq.*'",
    )
    check_queue_declare("amq.gen-abc", passive=True)
    check_queue_declare("", passive=False)  # server-named
    check_queue_declare("amqp.q", passive=False)


def test_exchange_delete_rules() -> None:
    assert error_text(check_exchange_delete, "", "/") == (
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )
    assert error_text(check_exchange_delete, "amq.direct", "/") == (
        403,
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed",
    )
    check_exchange_delete("mine", "/")


def test_binding_to_the_default_exchange_is_refused() -> None:
    assert error_text(check_bind, "") == (
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )
    check_bind("amq.direct")


# ------------------------------------------------------------------------- equivalence

X = Exchange("x", ExchangeType.DIRECT, durable=False)
PREFIX_X = "PRECONDITION_FAILED - inequivalent arg"


@pytest.mark.parametrize(
    ("requested", "text"),
    [
        (
            dataclasses.replace(X, type=ExchangeType.FANOUT),
            "'type' for exchange 'x' in vhost '/': received 'fanout' but current is 'direct'",
        ),
        (
            dataclasses.replace(X, durable=True),
            "'durable' for exchange 'x' in vhost '/': received 'true' but current is 'false'",
        ),
        (
            dataclasses.replace(X, auto_delete=True),
            "'auto_delete' for exchange 'x' in vhost '/': received 'true' but current is 'false'",
        ),
        (
            dataclasses.replace(X, internal=True),
            "'internal' for exchange 'x' in vhost '/': received 'true' but current is 'false'",
        ),
        (
            dataclasses.replace(X, arguments={"alternate-exchange": S("S", "ae")}),
            "'alternate-exchange' for exchange 'x' in vhost '/': received the value 'ae' of "
            "type 'longstr' but current is none",
        ),
    ],
)
def test_exchange_inequivalence_messages(requested: Exchange, text: str) -> None:
    assert error_text(check_equivalent, X, requested, vhost="/") == (406, f"{PREFIX_X} {text}")


def test_exchange_alternate_exchange_values_and_other_arguments() -> None:
    current = dataclasses.replace(X, arguments={"alternate-exchange": S("S", "a")})
    requested = dataclasses.replace(X, arguments={"alternate-exchange": S("S", "b")})
    assert error_text(check_equivalent, current, requested, vhost="/v")[1] == (
        f"{PREFIX_X} 'alternate-exchange' for exchange 'x' in vhost '/v': received 'b' but "
        "current is 'a'"
    )
    # Only alternate-exchange is compared for exchanges.
    check_equivalent(X, dataclasses.replace(X, arguments={"x-anything": S("I", 1)}), vhost="/")
    # Type is checked first, whatever else differs.
    both = dataclasses.replace(X, type=ExchangeType.TOPIC, durable=True)
    assert "'type'" in error_text(check_equivalent, X, both, vhost="/")[1]


def test_predeclared_exchange_redeclare() -> None:
    amq_topic = next(x for x in PREDECLARED_EXCHANGES if x.name == "amq.topic")
    check_equivalent(amq_topic, Exchange("amq.topic", ExchangeType.TOPIC, durable=True), vhost="/")
    assert error_text(
        check_equivalent, amq_topic, Exchange("amq.topic", ExchangeType.TOPIC), vhost="/"
    )[1] == (
        f"{PREFIX_X} 'durable' for exchange 'amq.topic' in vhost '/': received 'false' but "
        "current is 'true'"
    )


Q = Queue("q", durable=True)


def with_args(queue: Queue, **args: Field) -> Queue:
    return dataclasses.replace(queue, arguments={k.replace("_", "-"): v for k, v in args.items()})


@pytest.mark.parametrize(
    ("current", "requested", "text"),
    [
        (
            Q,
            dataclasses.replace(Q, durable=False),
            "'durable' for queue 'q' in vhost '/': received 'false' but current is 'true'",
        ),
        (
            Q,
            dataclasses.replace(Q, auto_delete=True),
            "'auto_delete' for queue 'q' in vhost '/': received 'true' but current is 'false'",
        ),
        (
            # The message RabbitMQ users know from x-max-priority.
            Q,
            with_args(Q, x_max_priority=S("b", 2)),
            "'x-max-priority' for queue 'q' in vhost '/': received the value '2' of type "
            "'byte' but current is none",
        ),
        (
            with_args(Q, x_message_ttl=S("I", 1000)),
            with_args(Q, x_message_ttl=S("I", 2000)),
            "'x-message-ttl' for queue 'q' in vhost '/': received '2000' but current is '1000'",
        ),
        (
            with_args(Q, x_message_ttl=S("I", 1000)),
            with_args(Q, x_message_ttl=S("d", 1000.0)),
            "'x-message-ttl' for queue 'q' in vhost '/': received '1000.0' but current is '1000'",
        ),
        (
            with_args(Q, x_dead_letter_exchange=S("S", "dlx")),
            Q,
            "'x-dead-letter-exchange' for queue 'q' in vhost '/': received none but current "
            "is the value 'dlx' of type 'longstr'",
        ),
        (
            with_args(Q, x_queue_type=S("S", "quorum")),
            Q,
            "'x-queue-type' for queue 'q' in vhost '/': received none but current is the "
            "value 'quorum' of type 'longstr'",
        ),
        (
            with_args(Q, x_single_active_consumer=S("t", True)),
            with_args(Q, x_single_active_consumer=S("t", False)),
            "'x-single-active-consumer' for queue 'q' in vhost '/': received 'false' but "
            "current is 'true'",
        ),
        (
            with_args(Q, x_expires=S("D", Decimal("1.5"))),
            with_args(Q, x_expires=S("D", Decimal("2.5"))),
            "'x-expires' for queue 'q' in vhost '/': received '{1,25}' but current is '{1,15}'",
        ),
        (
            # Quorum queues compare x-delivery-limit; classic queues do not know it.
            with_args(Q, x_queue_type=S("S", "quorum"), x_delivery_limit=S("I", 5)),
            with_args(Q, x_queue_type=S("S", "quorum")),
            "'x-delivery-limit' for queue 'q' in vhost '/': received none but current is the "
            "value '5' of type 'signedint'",
        ),
    ],
)
def test_queue_inequivalence_messages(current: Queue, requested: Queue, text: str) -> None:
    assert error_text(check_equivalent, current, requested, vhost="/") == (
        406,
        f"{PREFIX_X} {text}",
    )


@pytest.mark.parametrize(
    ("current", "requested"),
    [
        # Integer types are one class (rabbit_misc:type_class).
        (with_args(Q, x_message_ttl=S("I", 1000)), with_args(Q, x_message_ttl=S("l", 1000))),
        (with_args(Q, x_max_length=S("b", 5)), with_args(Q, x_max_length=S("u", 5))),
        # float and double are one class.
        (with_args(Q, x_message_ttl=S("f", 1.5)), with_args(Q, x_message_ttl=S("d", 1.5))),
        # Different classes, same (=:=) value: accepted.
        (with_args(Q, x_expires=S("l", 5)), with_args(Q, x_expires=S("T", 5))),
        # Classic queues may or may not spell out their type (rabbitmq-common#341).
        (Q, with_args(Q, x_queue_type=S("S", "classic"))),
        (with_args(Q, x_queue_type=S("S", "classic")), Q),
        # Arguments the queue type does not compare may differ.
        (with_args(Q, x_custom=S("S", "a")), with_args(Q, x_custom=S("S", "b"))),
        (Q, with_args(Q, x_delivery_limit=S("I", 3))),  # not a classic queue argument
        # Binaries compare as octets whatever their tag class... within a class only.
        (
            with_args(Q, x_overflow=S("S", "drop-head")),
            with_args(Q, x_overflow=S("S", "drop-head")),
        ),
    ],
)
def test_queue_equivalent_declarations(current: Queue, requested: Queue) -> None:
    check_equivalent(current, requested, vhost="/")


def test_string_and_bytes_are_different_classes_for_arguments() -> None:
    # longstr and binary are distinct type classes but =:= as binaries: accepted.
    current = with_args(Q, x_dead_letter_exchange=S("S", "dlx"))
    requested = with_args(Q, x_dead_letter_exchange=S("x", b"dlx"))
    check_equivalent(current, requested, vhost="/")


LOCKED = (
    "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'q' in vhost '/'. It "
    "could be originally declared on another connection or the exclusive property value "
    "does not match that of the original declaration."
)


def test_exclusive_redeclare_rules() -> None:
    mine = Queue("q", exclusive=True, owner="c1")
    check_equivalent(mine, Queue("q", exclusive=True, owner="c1"), vhost="/")
    # Another connection, or a different exclusive flag: 405 before anything else.
    code, text = error_text(
        check_equivalent, mine, Queue("q", exclusive=True, owner="c2", durable=True), vhost="/"
    )
    assert (code, text[:255]) == (405, LOCKED[:255])
    assert error_text(check_equivalent, mine, Queue("q"), vhost="/")[0] == 405
    assert error_text(check_equivalent, Queue("q"), mine, vhost="/")[0] == 405


def test_exclusive_access() -> None:
    mine = Queue("q", exclusive=True, owner="c1")
    check_exclusive_access(mine, "c1", "/")
    check_exclusive_access(Queue("q"), "c2", "/")
    assert error_text(check_exclusive_access, mine, "c2", "/")[0] == 405


def test_check_equivalent_needs_two_of_a_kind() -> None:
    with pytest.raises(TypeError):
        check_equivalent(X, Q, vhost="/")


def test_queue_type_of() -> None:
    assert queue_type_of({}) == "classic"
    assert queue_type_of({"x-queue-type": S("S", "stream")}) == "stream"
    assert queue_type_of({"x-queue-type": S("I", 1)}) == "classic"


# ------------------------------------------------------------------------------ properties

values = st.sampled_from(
    [S("I", 1), S("l", 2), S("S", "a"), S("t", True), S("d", 0.5), S("V", None)]
)
argument_tables = st.dictionaries(
    st.sampled_from(["alternate-exchange", "x-message-ttl", "x-expires", "x-foo"]),
    values,
    max_size=3,
)
exchanges = st.builds(
    Exchange,
    name=st.text(max_size=10),
    type=st.sampled_from(list(ExchangeType)),
    durable=st.booleans(),
    auto_delete=st.booleans(),
    internal=st.booleans(),
    arguments=argument_tables,
)


@given(exchanges)
def test_redeclaring_the_same_exchange_is_fine(exchange: Exchange) -> None:
    check_equivalent(exchange, exchange, vhost="/")


@given(exchanges, st.sampled_from(["type", "durable", "auto_delete", "internal"]))
def test_each_exchange_field_is_compared(exchange: Exchange, field: str) -> None:
    if field == "type":
        other = next(t for t in ExchangeType if t is not exchange.type)
        requested = dataclasses.replace(exchange, type=other)
    else:
        requested = dataclasses.replace(exchange, **{field: not getattr(exchange, field)})
    code, text = error_text(check_equivalent, exchange, requested, vhost="/")
    assert code == 406
    assert text.startswith(f"{PREFIX_X} '{field}' for exchange ")


@given(
    durable=st.booleans(),
    auto_delete=st.booleans(),
    owner=st.none() | st.just("c1"),
    arguments=argument_tables,
)
def test_redeclaring_the_same_queue_is_fine(
    durable: bool, auto_delete: bool, owner: str | None, arguments: Mapping[str, Field]
) -> None:
    queue = Queue("q", durable, owner is not None, auto_delete, arguments, owner)
    check_equivalent(queue, queue, vhost="/")
