"""The x-death bookkeeping of dead-lettering (gateway/model/dead_letter.py), against what
RabbitMQ documents (docs/dlx.md "Dead-Lettered Effects on Messages")."""

from __future__ import annotations

from typing import get_args

from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.fieldtable import Field
from gateway.amqp.properties import MessageProperties, decode_properties, encode_properties
from gateway.model.dead_letter import (
    DeadLetterTarget,
    Death,
    Reason,
    dead_letter_target,
    dead_lettered,
    deaths_of,
    is_cycle,
)
from tests.unit.model.strategies import header_tables

REASONS: list[Reason] = list(get_args(Reason))


def test_the_first_dead_lettering_writes_every_header_as_rabbitmq_does() -> None:
    before = MessageProperties(
        content_type="text/plain", expiration="60000", headers={"app": Field("S", "kept")}
    )
    after = dead_lettered(
        before, queue="q1", reason="rejected", exchange="exch", routing_keys=["apple"], now=1700
    )
    assert after.expiration is None  # so that it does not expire again where it goes
    assert after.content_type == "text/plain"
    headers = after.headers
    assert headers is not None
    assert headers["app"] == Field("S", "kept")
    assert headers["x-death"] == Field(
        "A",
        [
            Field(
                "F",
                {
                    "count": Field("l", 1),
                    "reason": Field("S", "rejected"),
                    "queue": Field("S", "q1"),
                    "time": Field("T", 1700),
                    "exchange": Field("S", "exch"),
                    "routing-keys": Field("A", [Field("S", "apple")]),
                    "original-expiration": Field("S", "60000"),
                },
            )
        ],
    )
    for part, value in (("queue", "q1"), ("reason", "rejected"), ("exchange", "exch")):
        assert headers[f"x-first-death-{part}"] == Field("S", value)
        assert headers[f"x-last-death-{part}"] == Field("S", value)


def test_a_pair_seen_before_counts_up_and_moves_to_the_front() -> None:
    first = dead_lettered(
        MessageProperties(), queue="q1", reason="expired", exchange="", routing_keys=["q1"], now=1
    )
    second = dead_lettered(
        first, queue="q2", reason="rejected", exchange="dlx", routing_keys=["k"], now=2
    )
    third = dead_lettered(
        second, queue="q1", reason="expired", exchange="dlx2", routing_keys=["z"], now=3
    )
    assert deaths_of(third) == [Death("q1", "expired"), Death("q2", "rejected")]
    assert third.headers is not None
    front = third.headers["x-death"].value[0].value
    assert front["count"] == Field("l", 2)
    # The fields of the first time stay (RabbitMQ: "before ... the first time").
    assert front["exchange"] == Field("S", "")
    assert front["time"] == Field("T", 1)
    assert third.headers["x-first-death-queue"] == Field("S", "q1")
    assert third.headers["x-first-death-reason"] == Field("S", "expired")
    assert third.headers["x-last-death-exchange"] == Field("S", "dlx2")
    assert third.headers["x-last-death-reason"] == Field("S", "expired")


def test_only_automatic_loops_are_cycles() -> None:
    assert is_cycle([Death("a", "expired")], "a")
    assert is_cycle([Death("b", "maxlen"), Death("a", "expired")], "a")
    assert not is_cycle([Death("b", "rejected"), Death("a", "expired")], "a")
    assert not is_cycle([Death("a", "rejected")], "a")
    assert not is_cycle([Death("b", "expired")], "a")
    assert not is_cycle([], "a")


def test_the_target_comes_from_the_queue_arguments() -> None:
    assert dead_letter_target({}) is None
    assert dead_letter_target({"x-dead-letter-exchange": Field("S", "")}) == DeadLetterTarget("")
    assert dead_letter_target(
        {"x-dead-letter-exchange": Field("S", "d"), "x-dead-letter-routing-key": Field("S", "k")}
    ) == DeadLetterTarget("d", "k")


events = st.lists(
    st.tuples(st.sampled_from(["q1", "q2", "q3"]), st.sampled_from(REASONS)), max_size=12
)


@given(headers=header_tables(), history=events)
def test_any_history_round_trips_and_counts_every_event(
    headers: dict[str, Field], history: list[tuple[str, Reason]]
) -> None:
    properties = MessageProperties(headers=headers or None)
    for now, (queue, reason) in enumerate(history):
        properties = dead_lettered(
            properties, queue=queue, reason=reason, exchange="x", routing_keys=["k"], now=now
        )
        # What goes on the wire comes back the same (each value keeps its AMQP type).
        properties = decode_properties(encode_properties(properties))
    deaths = deaths_of(properties)
    # One entry per (queue, reason) pair, most recent first.
    expected: list[Death] = []
    for queue, reason in reversed(history):
        if Death(queue, reason) not in expected:
            expected.append(Death(queue, reason))
    assert deaths == expected
    if not history:
        return
    assert properties.headers is not None
    counts = {
        (entry.value["queue"].value, entry.value["reason"].value): entry.value["count"].value
        for entry in properties.headers["x-death"].value
    }
    assert sum(counts.values()) == len(history)
    assert properties.headers["x-first-death-queue"] == Field("S", history[0][0])
    assert properties.headers["x-last-death-reason"] == Field("S", history[-1][1])
