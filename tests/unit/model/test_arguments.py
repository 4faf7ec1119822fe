"""Argument validation in RabbitMQ's order and words, then the gateway's refusals."""

from __future__ import annotations

import pytest

from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.amqp.fieldtable import Field
from gateway.model.arguments import (
    ACCEPTED_WITHOUT_EFFECT,
    IMPLEMENTED,
    NOT_IMPLEMENTED,
    QUEUE_ARGUMENTS,
    check_consume_arguments,
    check_exchange_arguments,
    check_queue_arguments,
)

WHERE = "queue 'q' in vhost '/'"
NOT_OURS = "not implemented by Starlight for RabbitMQ"


def refusal(arguments: dict[str, Field], **flags: bool) -> str | None:
    try:
        check_queue_arguments(
            WHERE,
            arguments,
            durable=flags.get("durable", True),
            exclusive=flags.get("exclusive", False),
            auto_delete=flags.get("auto_delete", False),
        )
    except ChannelError as error:
        assert error.reply_code == ReplyCode.PRECONDITION_FAILED
        return error.reply_text.removeprefix("PRECONDITION_FAILED - ")
    return None


def test_every_known_argument_is_either_accepted_or_refused() -> None:
    known = set().union(*QUEUE_ARGUMENTS.values())
    assert known == NOT_IMPLEMENTED | set(ACCEPTED_WITHOUT_EFFECT) | IMPLEMENTED
    assert not NOT_IMPLEMENTED & set(ACCEPTED_WITHOUT_EFFECT)
    assert not NOT_IMPLEMENTED & IMPLEMENTED


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"x-max-priority": Field("I", -1)}, "{value_negative,-1}"),
        ({"x-max-priority": Field("S", "10")}, '"expected integer, got longstr"'),
        ({"x-max-priority": Field("d", 10.0)}, '"expected integer, got double"'),
        ({"x-message-ttl": Field("l", -5)}, "{value_negative,-5}"),
        ({"x-message-ttl": Field("l", 315_360_000_001)}, "{value_too_large,315360000001}"),
        ({"x-message-ttl": Field("d", 1.0)}, '"expected integer, got double"'),
        ({"x-expires": Field("b", 0)}, "{value_zero,0}"),
        ({"x-max-priority": Field("s", 256)}, "{max_value_exceeded,256}"),
        ({"x-single-active-consumer": Field("S", "true")}, "{unacceptable_type,longstr}"),
        ({"x-max-length-bytes": Field("I", -1)}, "{value_negative,-1}"),
        ({"x-max-length-bytes": Field("S", "1k")}, '"expected integer, got longstr"'),
        ({"x-overflow": Field("I", 1)}, "{unacceptable_type,signedint}"),
        ({"x-queue-version": Field("I", 3)}, "\"unsupported queue version '3'\""),
        ({"x-queue-leader-locator": Field("S", "nearest")}, "invalid_queue_locator_arg"),
        ({"x-queue-type": Field("I", 1)}, "{unacceptable_type,signedint}"),
        ({"x-queue-type": Field("S", "lazy")}, "\"unsupported queue type 'lazy'\""),
    ],
)
def test_reasons(arguments: dict[str, Field], reason: str) -> None:
    assert refusal(arguments) == f"invalid arg '{next(iter(arguments))}' for {WHERE}: {reason}"


@pytest.mark.parametrize("kind", ["b", "B", "s", "u", "I", "i", "l"])
@pytest.mark.parametrize("value", [0, 1, 10, 127])
def test_max_priority_is_implemented_for_classic_queues(kind: str, value: int) -> None:
    # rabbit_amqqueue:check_max_priority_arg: a non-negative integer of any of its integer
    # types up to 255 (0 too: one priority, as RabbitMQ allows).
    assert refusal({"x-max-priority": Field(kind, value)}) is None
    assert refusal({"x-max-priority": Field("B", 255)}) is None


def test_implemented_arguments_are_accepted() -> None:
    assert refusal({"x-message-ttl": Field("I", 1000)}) is None
    assert refusal({"x-dead-letter-exchange": Field("S", "d")}) is None
    assert refusal({"x-expires": Field("I", 1000)}) is None
    assert refusal({"x-max-length": Field("I", 10), "x-overflow": Field("S", "drop-head")}) is None
    assert refusal({"x-max-length-bytes": Field("l", 0)}) is None
    assert refusal({"x-max-length-bytes": Field("I", 1024), "x-max-length": Field("b", 3)}) is None


def test_a_backend_refuses_what_it_does_not_implement_after_rabbitmqs_checks() -> None:
    refuses = {"x-max-length-bytes": "not here"}

    def check(arguments: dict[str, Field]) -> str | None:
        try:
            check_queue_arguments(
                WHERE,
                arguments,
                durable=True,
                exclusive=False,
                auto_delete=False,
                backend_refuses=refuses,
            )
        except ChannelError as error:
            return error.reply_text.removeprefix("PRECONDITION_FAILED - ")
        return None

    size = Field("l", 10)
    assert (
        check({"x-max-length-bytes": size})
        == f"invalid arg 'x-max-length-bytes' for {WHERE}: not here"
    )
    quorum = {"x-queue-type": Field("S", "quorum"), "x-max-length-bytes": size}
    assert check(quorum) == f"invalid arg 'x-max-length-bytes' for {WHERE}: not here"
    assert check({"x-max-length-bytes": Field("l", -1)}) == (
        f"invalid arg 'x-max-length-bytes' for {WHERE}: {{value_negative,-1}}"
    )
    assert check({"x-queue-type": Field("S", "stream"), "x-max-length-bytes": size}) is None
    assert check({"x-max-length": size}) is None


def test_dead_letter_exchange_type_is_checked_first() -> None:
    # rabbit_channel checks it before rabbit_amqqueue sees any argument.
    arguments = {"x-max-length": Field("l", -1), "x-dead-letter-exchange": Field("l", 1)}
    assert refusal(arguments) == f"invalid type 'long' for arg 'x-dead-letter-exchange' in {WHERE}"


def test_invalid_values_come_before_refusals() -> None:
    # RabbitMQ would refuse the value; the argument then never needs implementing.
    arguments = {"x-max-length-bytes": Field("I", 5), "x-message-ttl": Field("I", -1)}
    assert refusal(arguments) == f"invalid arg 'x-message-ttl' for {WHERE}: {{value_negative,-1}}"


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"x-queue-type": Field("S", "classic")},
        {"x-queue-type": Field("S", "rabbit_classic_queue")},
        {"x-queue-type": Field("S", "")},  # RabbitMQ: the default type
        {"x-queue-mode": Field("S", "lazy")},
        {"x-queue-master-locator": Field("S", "min-masters")},
        {"x-custom": Field("S", "kept"), "no-prefix": Field("t", True)},
    ],
)
def test_accepted(arguments: dict[str, Field]) -> None:
    assert refusal(arguments) is None


def test_quorum() -> None:
    quorum = {"x-queue-type": Field("S", "quorum")}
    assert refusal({**quorum, "x-quorum-initial-group-size": Field("I", 3)}) is None
    assert refusal({**quorum, "x-quorum-initial-group-size": Field("I", 0)}) == (
        f"invalid arg 'x-quorum-initial-group-size' for {WHERE}: {{value_zero,0}}"
    )
    assert refusal({**quorum, "x-delivery-limit": Field("I", 3)}) == (
        f"invalid arg 'x-delivery-limit' for {WHERE}: {NOT_OURS}"
    )
    assert refusal({**quorum, "x-max-priority": Field("I", 3)}) == (
        f"invalid arg 'x-max-priority' for {WHERE} of queue type rabbit_quorum_queue"
    )
    # rabbit_quorum_queue:declare's order: auto-delete, exclusive, durable.
    assert refusal(quorum, durable=False, exclusive=True, auto_delete=True) == (
        f"invalid property 'auto-delete' for {WHERE}"
    )
    assert refusal(quorum, durable=False, exclusive=True) == (
        f"invalid property 'exclusive-owner' for {WHERE}"
    )
    assert refusal(quorum, durable=False) == f"invalid property 'non-durable' for {WHERE}"


def test_consumer_arguments() -> None:
    classic: dict[str, Field] = {}
    check_consume_arguments(WHERE, classic, {"x-custom": Field("I", 1)})
    # Consumer priorities are implemented: any integer type, negative too.
    for kind, value in (("I", 1), ("b", -3), ("l", 2**40), ("B", 7)):
        check_consume_arguments(WHERE, classic, {"x-priority": Field(kind, value)})
    with pytest.raises(ChannelError, match='"expected integer, got longstr"'):
        check_consume_arguments(WHERE, classic, {"x-priority": Field("S", "high")})
    quorum = {"x-queue-type": Field("S", "quorum")}
    with pytest.raises(ChannelError, match=r"'x-consumer-timeout' .*: not implemented"):
        check_consume_arguments(WHERE, quorum, {"x-consumer-timeout": Field("I", 1000)})


def test_exchange_arguments() -> None:
    where = "exchange 'x' in vhost '/'"
    check_exchange_arguments(where, {"x-custom": Field("I", 1)})
    check_exchange_arguments(where, {"alternate-exchange": Field("S", "ae")})
    with pytest.raises(ChannelError) as refused:
        check_exchange_arguments(where, {"alternate-exchange": Field("x", b"ae")})
    assert refused.value.reply_text == (
        f"PRECONDITION_FAILED - invalid type 'binary' for arg 'alternate-exchange' in {where}"
    )


STREAM = {"x-queue-type": Field("S", "stream")}


@pytest.mark.parametrize(
    ("arguments", "flags", "reason"),
    [
        ({}, {"auto_delete": True}, f"invalid property 'auto-delete' for {WHERE}"),
        ({}, {"exclusive": True}, f"invalid property 'exclusive-owner' for {WHERE}"),
        ({}, {"durable": False}, f"invalid property 'non-durable' for {WHERE}"),
        (
            {"x-max-age": Field("S", "7W")},
            {},
            f"invalid arg 'x-max-age' for {WHERE}: invalid_max_age",
        ),
        (
            {"x-max-age": Field("l", 7)},
            {},
            f"invalid arg 'x-max-age' for {WHERE}: {{unacceptable_type,long}}",
        ),
        (
            {"x-max-length": Field("l", 7)},
            {},
            f"invalid arg 'x-max-length' for {WHERE} of queue type rabbit_stream_queue",
        ),
        (
            {"x-stream-max-segment-size-bytes": Field("l", 3_000_000_001)},
            {},
            "Exceeded max value for x-stream-max-segment-size-bytes",
        ),
        (
            {"x-stream-filter-size-bytes": Field("I", 15)},
            {},
            "Invalid value for  x-stream-filter-size-bytes",
        ),
        # The properties come first, then the sizes (rabbit_stream_queue:declare).
        (
            {"x-stream-filter-size-bytes": Field("I", 300)},
            {"durable": False},
            f"invalid property 'non-durable' for {WHERE}",
        ),
    ],
)
def test_stream_declare_rules(
    arguments: dict[str, Field], flags: dict[str, bool], reason: str
) -> None:
    assert refusal({**STREAM, **arguments}, **flags) == reason


def test_a_stream_accepts_its_own_arguments() -> None:
    arguments = {
        **STREAM,
        "x-max-age": Field("S", "12h"),
        "x-max-length-bytes": Field("l", 20_000_000_000),
        "x-stream-max-segment-size-bytes": Field("l", 3_000_000_000),
        "x-stream-filter-size-bytes": Field("I", 255),
        "x-initial-cluster-size": Field("I", 3),
        "x-queue-leader-locator": Field("S", "client-local"),
    }
    assert refusal(arguments) is None


def test_stream_consumer_arguments_are_left_to_the_stream() -> None:
    check_consume_arguments(WHERE, STREAM, {"x-stream-offset": Field("S", "first")})
    with pytest.raises(ChannelError, match="of queue type rabbit_classic_queue"):
        check_consume_arguments(WHERE, {}, {"x-stream-offset": Field("S", "first")})
