"""Real gateway processes with the management API on, for the tests of docs/management.md.

Each module gets its own Pulsar namespace (the vhost ``/`` of its gateways) and its own
ZooKeeper chroot: the management API lists every vhost and every connection of a fleet, and
the shared stack's ZooKeeper serves other test runs, whose vhosts and replicas would otherwise
show up here (and ours there).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.managed_fleet import Managed, ManagedFleet, managed_fleet


@pytest.fixture(scope="module")
def management(
    tmp_path_factory: pytest.TempPathFactory, pulsar_stack: Any
) -> Iterator[ManagedFleet]:
    """A fleet of the module's own (authentication off: every user is an administrator)."""
    with managed_fleet(tmp_path_factory.mktemp("management"), pulsar_stack) as fleet:
        yield fleet


@pytest.fixture(scope="module")
def gateway(management: ManagedFleet) -> Managed:
    """One replica of it, with its management API."""
    return management.start("replica-1")
