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
