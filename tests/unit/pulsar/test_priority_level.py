"""Pulsar's consumer priority level set through libpulsar's C API (pulsar/priority_level.py):
AMQP's higher-first mapped onto Pulsar's lower-first, and the level read back from a real
``_pulsar.ConsumerConfiguration`` with this environment's pulsar-client."""

from __future__ import annotations

import _pulsar
import pytest

from gateway.pulsar.native_objects import cpp_address
from gateway.pulsar.priority_level import (
    BASE_LEVEL,
    PriorityLevels,
    level_for,
    priority_levels,
)


def test_higher_amqp_priorities_are_lower_pulsar_levels() -> None:
    assert level_for(0) == BASE_LEVEL
    assert level_for(10) < level_for(1) < level_for(0) < level_for(-1) < level_for(-10)
    assert level_for(2**40) == 0  # clamped to Pulsar's highest
    assert level_for(-(2**40)) == 2**31 - 1  # and to a C int


def test_a_level_is_set_on_the_native_configuration() -> None:
    levels = priority_levels()
    assert levels.available, levels.why_not
    configuration = _pulsar.ConsumerConfiguration()
    configuration.receiver_queue_size(123)
    levels.apply(configuration, 42)
    assert levels._get is not None
    assert levels._get(cpp_address(configuration)) == 42
    assert configuration.receiver_queue_size() == 123  # nothing else touched


def test_out_of_range_levels_and_unloaded_levels_raise() -> None:
    levels = priority_levels()
    with pytest.raises(ValueError, match="priority level"):
        levels.apply(_pulsar.ConsumerConfiguration(), -1)  # the C++ setter would abort
    with pytest.raises(RuntimeError, match="not available: not loaded"):
        PriorityLevels().apply(_pulsar.ConsumerConfiguration(), 1)
