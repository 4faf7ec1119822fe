"""Length-limit rules (gateway/model/length_limit.py) as RabbitMQ documents them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.fieldtable import Field
from gateway.model.length_limit import LengthLimit, length_limit


def test_the_limit_comes_from_the_arguments() -> None:
    assert length_limit({}) is None
    assert length_limit({"x-overflow": Field("S", "reject-publish")}) is None  # no effect
    assert length_limit({"x-max-length": Field("b", 5)}) == LengthLimit(5, "drop-head")
    for mode in ("drop-head", "reject-publish", "reject-publish-dlx"):
        found = length_limit({"x-max-length": Field("l", 1), "x-overflow": Field("S", mode)})
        assert found == LengthLimit(1, mode)  # type: ignore[arg-type]


@given(limit=st.integers(min_value=0, max_value=1000), ready=st.integers(0, 2000))
def test_room_and_excess_agree(limit: int, ready: int) -> None:
    drop_head = LengthLimit(limit)
    assert drop_head.excess(ready) == max(0, ready - limit)
    assert drop_head.has_room(ready) == (ready < limit)
    # After dropping the excess and taking one more, the queue is at most at its limit.
    assert min(ready, limit) <= limit
    assert not drop_head.rejects_publish
    assert LengthLimit(limit, "reject-publish").rejects_publish
    assert LengthLimit(limit, "reject-publish-dlx").dead_letters_rejected


def test_the_byte_limit_comes_from_the_arguments() -> None:
    assert length_limit({"x-max-length-bytes": Field("l", 100)}) == LengthLimit(None, max_bytes=100)
    both = length_limit(
        {
            "x-max-length": Field("b", 3),
            "x-max-length-bytes": Field("I", 10),
            "x-overflow": Field("S", "reject-publish"),
        }
    )
    assert both == LengthLimit(3, "reject-publish", 10)


limits = st.one_of(st.none(), st.integers(min_value=0, max_value=50))


@given(
    max_length=limits,
    max_bytes=limits,
    ready=st.integers(0, 60),
    ready_bytes=st.integers(0, 60),
    size=st.integers(0, 60),
)
def test_room_and_overflow_are_rabbitmqs(
    max_length: int | None, max_bytes: int | None, ready: int, ready_bytes: int, size: int
) -> None:
    """rabbit_amqqueue_process: ``will_overflow`` (len + 1 > max_length orelse bytes + size >
    max_bytes) refuses a publish; ``over_max_length`` (len > max_length orelse bytes >
    max_bytes) drops the head. An unset limit never applies (Erlang's ``undefined`` compares
    greater than any integer)."""
    limit = LengthLimit(max_length, "reject-publish", max_bytes)
    unset = 10**9
    length, size_limit = (
        unset if max_length is None else max_length,
        unset if max_bytes is None else max_bytes,
    )
    assert limit.has_room(ready, ready_bytes, size) == (
        not (ready + 1 > length or ready_bytes + size > size_limit)
    )
    assert limit.over(ready, ready_bytes) == (ready > length or ready_bytes > size_limit)


def test_a_zero_byte_limit_takes_empty_bodies_only() -> None:
    limit = LengthLimit(None, "reject-publish", 0)
    assert limit.has_room(5, 0, 0)
    assert not limit.has_room(0, 0, 1)
    assert not limit.over(5, 0)
    assert limit.over(1, 1)


def test_a_streams_byte_limit_is_its_retention_not_a_length_limit() -> None:
    stream = {"x-queue-type": Field("S", "stream"), "x-max-length-bytes": Field("l", 10)}
    assert length_limit(stream) is None
