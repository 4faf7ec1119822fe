"""Delivery tags and prefetch credit (the sans-IO rules the session applies)."""

from __future__ import annotations

import pytest

from gateway.amqp.commands import BasicQos
from gateway.amqp.deliveries import DeliveryTags, Prefetch
from gateway.amqp.errors import AMQPError, ReplyCode


def _delivered(count: int) -> DeliveryTags[str]:
    tags: DeliveryTags[str] = DeliveryTags()
    for _ in range(count):
        tag = tags.next()
        tags.unsettled[tag] = f"m{tag}"
    return tags


def test_tags_start_at_one_and_grow_by_one() -> None:
    tags: DeliveryTags[str] = DeliveryTags()
    assert [tags.next() for _ in range(3)] == [1, 2, 3]


def test_settle_one_many_and_all() -> None:
    tags = _delivered(5)
    assert tags.settle(2, multiple=False) == ["m2"]
    assert tags.settle(3, multiple=True) == ["m1", "m3"]
    assert tags.settle(0, multiple=True) == ["m4", "m5"]
    assert tags.unsettled == {}


@pytest.mark.parametrize("multiple", [False, True])
def test_an_unknown_or_settled_tag_is_406(multiple: bool) -> None:
    tags = _delivered(2)
    tags.settle(1, multiple=False)
    for tag in (1, 9):
        with pytest.raises(AMQPError) as raised:
            tags.settle(tag, multiple)
        assert raised.value.reply_code == ReplyCode.PRECONDITION_FAILED
        assert raised.value.reply_text == f"PRECONDITION_FAILED - unknown delivery tag {tag}"


def test_forgotten_tags_may_still_be_settled_once() -> None:
    tags = _delivered(4)
    assert tags.forget(lambda m: m in ("m2", "m3")) == ["m2", "m3"]
    assert tags.settle(2, multiple=False) == []
    with pytest.raises(AMQPError):
        tags.settle(2, multiple=False)
    assert tags.settle(3, multiple=True) == ["m1"]  # forgotten 3 is known; 1 is settled
    with pytest.raises(AMQPError):
        tags.settle(3, multiple=False)
    assert list(tags.unsettled) == [4]


def test_prefetch_limits_per_consumer_and_per_channel() -> None:
    prefetch = Prefetch()
    assert prefetch.window() == 0
    assert prefetch.allows(False, 0, 1000, lambda: 1000)
    prefetch.qos(BasicQos(prefetch_count=3))
    prefetch.qos(BasicQos(prefetch_count=5, global_=True))
    assert (prefetch.consumer, prefetch.channel, prefetch.window()) == (3, 5, 3)
    assert prefetch.allows(False, 3, 2, lambda: 4)
    assert not prefetch.allows(False, 3, 3, lambda: 3)  # the consumer's own limit
    assert not prefetch.allows(False, 3, 1, lambda: 5)  # the channel's, shared
    assert prefetch.allows(True, 3, 9, lambda: 9)  # no-ack consumers are not limited


def test_a_byte_prefetch_is_refused_as_rabbitmq_does() -> None:
    with pytest.raises(AMQPError) as raised:
        Prefetch().qos(BasicQos(prefetch_size=10))
    assert raised.value.reply_code == ReplyCode.NOT_IMPLEMENTED
