"""Issue 17 item 3: one replica of two is cut off from Pulsar and ZooKeeper, then healed
(tests/faults/partition.py: how). Publishers with confirms and consumers with acks run on both
replicas, on one queue. bench/faults.py holds the partition past the producers' send timeout."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.partition import Partition, partitioned_fleet, through_a_partition

pytestmark = pytest.mark.integration

STALLED = 3.0  # seconds the isolated replica's publisher goes without a confirm, at least
REPLY_CODE = re.compile(r"^\d{3} ")


@pytest.fixture
def partition(tmp_path: Path, pulsar_stack: Any) -> Iterator[Partition]:
    # The shared stack is not used, but starting it first resolves Pulsar's classpath once
    # where every standalone of the session finds it (scripts/stack.py).
    del pulsar_stack
    with partitioned_fleet(tmp_path) as fleet:
        yield fleet


def test_a_partitioned_replica(partition: Partition) -> None:
    # Checked by the scenario: the other replica takes the lead and its clients publish and
    # consume on; the isolated one stays up and confirms nothing for a while; after healing
    # it confirms again and every confirmed message is delivered.
    figures = through_a_partition(partition, stalled=STALLED)
    print(figures.describe())
    for name, closes in figures.closes.items():
        assert all(REPLY_CODE.match(close) for close in closes), (name, closes)
        if name.startswith("steady"):
            assert not closes, (name, closes)
