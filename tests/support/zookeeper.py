"""Plain kazoo clients for tests that look at, prepare or clean up znodes directly."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

from kazoo.client import KazooClient


@contextlib.contextmanager
def kazoo_client(hosts: str) -> Iterator[KazooClient]:
    """A started client, stopped and closed afterwards."""
    client = KazooClient(hosts)
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def unique_prefix() -> str:
    """A ZooKeeper path of a test's own (delete it with ``delete_tree``)."""
    return f"/starlight-rabbitmq-test-{uuid.uuid4().hex[:12]}"


def delete_tree(hosts: str, path: str) -> None:
    """``path`` and everything under it (nothing if it is not there)."""
    with kazoo_client(hosts) as client:
        client.delete(path, recursive=True)
