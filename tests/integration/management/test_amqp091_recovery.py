"""amqp091-go's 17 connection-recovery integration tests, unchanged, against a gateway whose
management API listens where they look for RabbitMQ's: ``localhost:15672``, ``guest:guest``
(``internal/utils``). Each finds its connection in ``GET /api/connections/`` by the
``connection_name`` client property, drops it with ``DELETE /api/connections/{name}``, and
checks that the client recovers (reconnects, redeclares its topology, resumes publishing and
consuming). The rest of the suite runs in tests/integration/clients/test_client_suites.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.client_suites import SuiteUnavailable, prepare_go, run_go
from tests.support.managed_fleet import ManagedFleet, managed_fleet

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

# Every test of amqp091-go v1.14.0 (client_suites.py's pin) that calls internal/utils'
# DropConnection: its recovery_test.go.
RECOVERY_TESTS = sorted(
    f"TestConnectionRecovery{name}"
    for name in (
        "Publish",
        "Consume",
        "ChannelIDReservation",
        "LifeCycleNotifyStateChange",
        "CancelInterrupt",
        "ExclusiveQueue",
        "DeletedQueueSkip",
        "TopologyOnlyTransient",
        "MultiChannelTopology",
        "TopologyAllEnabled",
        "TopologyDisabled",
        "ExhaustionDoesNotPanic",
        "AutoDeleteTopologyForgotten",
        "AutoDeleteExchangeCascade",
        "SkipAndContinue",
        "SkipAndContinueNoInfiniteLoop",
        "ConsumerNotForgottenAfterFailedResubscribe",
    )
)
# RabbitMQ's port, hard-wired in the suite.
PORT = 15672
# ~110 s on this machine kind (each test waits for its client to notice and reconnect).
TIMEOUT = 420.0


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        # As the gateway binds: connections of an earlier run in TIME_WAIT do not count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def fleet(tmp_path: Path, pulsar_stack: Any) -> Iterator[ManagedFleet]:
    with managed_fleet(tmp_path, pulsar_stack) as managed:
        yield managed


def test_the_recovery_tests_pass_through_the_management_api(
    fleet: ManagedFleet, tmp_path: Path
) -> None:
    assert len(RECOVERY_TESTS) == 17
    if not _port_free(PORT):
        pytest.skip(f"port {PORT} is taken: the suite's management URL is hard-wired to it")
    try:
        suite = prepare_go()
    except SuiteUnavailable as error:
        pytest.skip(f"amqp091-go's suite is not available: {error}")
    # RabbitMQ's channel-max, as test_client_suites.py's gateway (its docstring says why).
    process = fleet.fleet.start(
        "recovery",
        extra=f"managementListener=http://127.0.0.1:{PORT}\namqpSessionCountLimit=2047\n",
    )
    process.wait_ready()
    process.wait_for(r"gateway\.management: management API on")
    run = run_go(
        suite,
        f"amqp://guest:guest@127.0.0.1:{process.port}/",
        only=RECOVERY_TESTS,
        timeout=TIMEOUT,
        log=tmp_path / "amqp091-go-recovery.log",
    )
    failed = {name: run.outcomes[name].detail for name in run.with_status("failed")}
    assert failed == {}, run.tail
    assert sorted(run.with_status("passed")) == RECOVERY_TESTS
    # Every one of them went through DELETE /api/connections/{name}.
    closes = process.matching(r"closing on request: Closed via management plugin")
    assert len(closes) >= len(RECOVERY_TESTS)
