"""Starting and stopping a kazoo client from trio, for every ZooKeeper store of the gateway
(metadata, permissions): kazoo's ``start``/``stop``/``close`` block, so they run in a thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio
from kazoo.client import KazooClient

from gateway.metadata.store import MetadataUnavailable


async def start_client(
    client: KazooClient, listener: Callable[[Any], Any], hosts: str, timeout: float
) -> None:
    """Connect ``client`` with ``listener`` watching its state; MetadataUnavailable (and the
    listener removed again) if ZooKeeper cannot be reached within ``timeout``."""
    client.add_listener(listener)
    try:
        await trio.to_thread.run_sync(client.start, timeout, abandon_on_cancel=True)
    except Exception as error:
        client.remove_listener(listener)
        raise MetadataUnavailable(
            f"cannot connect to ZooKeeper at {hosts} within {timeout:g} s: {error}"
        ) from error


async def stop_client(client: KazooClient, listener: Callable[[Any], Any]) -> None:
    """Disconnect and release a started ``client``, even from a cancelled task."""
    client.remove_listener(listener)
    with trio.CancelScope(shield=True):
        await trio.to_thread.run_sync(client.stop)
        await trio.to_thread.run_sync(client.close)
