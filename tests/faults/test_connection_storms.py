"""Issue 17 item 6: connection storms against a real gateway process, a pika client served
throughout (bench/faults.py runs the same scenarios several times larger and prints figures)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.gateway_process import LimitedGatewayProcess, gateway, open_amqp, wait_until
from tests.faults.storms import KB, bursts, hold_idle, served_during, slow_loris

pytestmark = pytest.mark.integration

HANDSHAKE_TIMEOUT = 2.0
# Low enough to reach with a few hundred connections, high enough for the gateway's own
# descriptors (Pulsar and ZooKeeper clients, the metrics listener, Python's).
NOFILE = 256
IDLE_GOAL = 50 * KB


def _settled(process: LimitedGatewayProcess, descriptors: int) -> None:
    """Every connection the storm opened is gone from the gateway again (no leak)."""
    wait_until(
        lambda: process.open_descriptors() <= descriptors + 2,
        timeout=30,
        what=f"the gateway's descriptors back to {descriptors}",
    )


def _warm(process: LimitedGatewayProcess) -> int:
    """The gateway's descriptors once it has its Pulsar connections (made by the first client's
    round trip), so that later counts see only the storm's."""
    served_during(process.port, lambda: None)
    return process.open_descriptors()


def _no_failures_logged(process: LimitedGatewayProcess) -> None:
    assert not process.matching(r"Traceback|ERROR"), process.output()[-30:]


@pytest.fixture
def process(pulsar_stack: Any, tmp_path: Path) -> Iterator[LimitedGatewayProcess]:
    extra = f"amqpHandshakeTimeoutMs={int(HANDSHAKE_TIMEOUT * 1000)}\n"
    with gateway(pulsar_stack, tmp_path, extra=extra) as started:
        yield started


def test_bursts_of_connections_opened_and_closed(process: LimitedGatewayProcess) -> None:
    descriptors = _warm(process)
    opened, served = served_during(process.port, lambda: bursts(process.port, 500))
    print(f"500 connections in bursts of 50: {served.round_trips} round trips meanwhile")
    assert opened == 500
    assert served.round_trips >= 1
    _settled(process, descriptors)
    _no_failures_logged(process)


def test_idle_connections_cost_little_and_do_not_starve_others(
    process: LimitedGatewayProcess,
) -> None:
    descriptors = _warm(process)
    figures, held = hold_idle(process, 300)
    try:
        print(figures.describe())
        _, served = served_during(process.port, lambda: None)
        assert served.round_trips >= 1
        # Each idle connection accepted, not left in the kernel's backlog.
        assert {sock.getsockname()[1] for sock in held} <= process.peer_ports()
        assert figures.per_connection <= IDLE_GOAL, figures.describe()
    finally:
        for sock in held:
            sock.close()
    _settled(process, descriptors)
    _no_failures_logged(process)


def test_slow_and_silent_handshakes(process: LimitedGatewayProcess) -> None:
    figures, served = served_during(
        process.port, lambda: slow_loris(process.port, 50, 50, 0.2, HANDSHAKE_TIMEOUT)
    )
    print(figures, served)
    assert figures.slow_served == 50
    assert figures.silent_closed == 50
    assert served.round_trips >= 1


def test_out_of_file_descriptors_then_serving_again(pulsar_stack: Any, tmp_path: Path) -> None:
    with gateway(pulsar_stack, tmp_path, nofile=NOFILE) as process:
        held: list[socket.socket] = []
        try:
            while True:
                assert len(held) < NOFILE, "the open-files limit was not reached"
                try:
                    held.append(open_amqp(process.port, timeout=3.0))
                except (TimeoutError, ConnectionError):
                    break  # accepted by the kernel, never by the gateway: it is out of files
            process.wait_for(r"cannot accept connections: \d+ of 256 open files", timeout=30)
            cpu = process.cpu_seconds()
            time.sleep(1.0)  # a window in which a busy retry loop would burn a whole core
            cpu = process.cpu_seconds() - cpu
            print(f"{len(held)} connections at the limit; CPU {cpu:.2f} s in 1 s")
            assert process.alive()
            assert cpu < 0.5
            for sock in held[:20]:
                sock.close()
            _, served = served_during(process.port, lambda: None)
            assert served.round_trips >= 1
            process.wait_for(r"accepting connections again after", timeout=30)
            # One line for the episode, not one per retry, and no traceback.
            assert len(process.matching(r"cannot accept connections")) == 1
            assert not process.matching(r"Traceback|trio\.serve_listeners")
            # The descriptors kept from clients kept ZooKeeper and Pulsar in reach.
            assert not process.matching(r"ZooKeeper connection suspended|session lost")
        finally:
            for sock in held:
                sock.close()
