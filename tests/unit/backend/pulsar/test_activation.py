"""Which topics are subscribed lazily, and by which topic-key record (activation.py)."""

from __future__ import annotations

import pytest

from gateway.backend.pulsar.activation import (
    Activation,
    activation_for,
    default_activation,
    lazy_exchange,
)
from gateway.model.entities import Exchange, ExchangeType


def exchange(kind: ExchangeType) -> Exchange:
    return Exchange("x", kind)


@pytest.mark.parametrize("kind", [ExchangeType.DIRECT, ExchangeType.TOPIC])
def test_keyed_exchanges_are_lazy(kind: ExchangeType) -> None:
    assert lazy_exchange(exchange(kind))


@pytest.mark.parametrize("kind", [ExchangeType.FANOUT, ExchangeType.HEADERS])
def test_one_topic_exchanges_are_subscribed_at_bind(kind: ExchangeType) -> None:
    assert not lazy_exchange(exchange(kind))
    assert activation_for(exchange(kind), "any") is None


def test_a_direct_binding_waits_for_its_key() -> None:
    assert activation_for(exchange(ExchangeType.DIRECT), "k") == Activation("x", "k")
    assert activation_for(exchange(ExchangeType.DIRECT), "a.*") == Activation("x", "a.*")


def test_a_topic_binding_without_wildcards_names_one_key() -> None:
    assert activation_for(exchange(ExchangeType.TOPIC), "a.b") == Activation("x", "a.b")


@pytest.mark.parametrize("pattern", ["a.*", "#", "a.#.b"])
def test_a_topic_pattern_covers_registered_keys_only(pattern: str) -> None:
    assert activation_for(exchange(ExchangeType.TOPIC), pattern) is None


def test_a_queue_own_topic_is_the_default_exchange_key_of_its_name() -> None:
    assert default_activation("q 1") == Activation("", "q 1")
