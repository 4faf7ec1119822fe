"""The failure throttle: repeated login failures from one address are slowed down."""

from __future__ import annotations

from gateway.auth.throttle import FailureThrottle


def test_first_failures_are_free_then_the_delay_doubles_up_to_the_cap() -> None:
    throttle = FailureThrottle(free_failures=2, first_delay=0.25, max_delay=2.0)
    delays = [throttle.failed("10.0.0.1", float(t)) for t in range(8)]
    assert delays == [0.0, 0.0, 0.25, 0.5, 1.0, 2.0, 2.0, 2.0]


def test_other_addresses_are_not_slowed() -> None:
    throttle = FailureThrottle()
    for t in range(10):
        throttle.failed("10.0.0.1", float(t))
    assert throttle.failed("10.0.0.2", 10.0) == 0.0


def test_failures_are_forgotten_after_the_window() -> None:
    throttle = FailureThrottle(window=60.0)
    for t in range(5):
        throttle.failed("10.0.0.1", float(t))
    assert throttle.failures("10.0.0.1", 30.0) == 5
    assert throttle.failed("10.0.0.1", 100.0) == 0.0
    assert throttle.failures("10.0.0.1", 100.0) == 1


def test_memory_is_bounded() -> None:
    throttle = FailureThrottle(max_addresses=100)
    for n in range(1000):
        throttle.failed(f"10.0.{n // 256}.{n % 256}", 0.0)
    assert throttle.failures("10.0.0.0", 0.0) == 0  # evicted, least recently seen
    assert throttle.failures("10.0.3.231", 0.0) == 1


def test_zero_max_delay_disables_waiting() -> None:
    throttle = FailureThrottle(max_delay=0.0)
    assert {throttle.failed("a", float(t)) for t in range(10)} == {0.0}
