"""The operations of a ZooKeeper transaction, as the store writes them, and the limits of one
transaction (a multi is one packet: ZooKeeper refuses packets over ``jute.maxbuffer``, 1 MB by
default)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["TXN_BYTES", "TXN_OPS", "Check", "Create", "Delete", "Op", "SetData", "op_size"]

# Operations per transaction, and their approximate size.
TXN_OPS: Final = 900
TXN_BYTES: Final = 512 * 1024


@dataclass(frozen=True, slots=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class Check:
    """Fails the transaction unless ``path`` exists (at ``version``; -1: any)."""

    path: str
    version: int = -1


Op = Create | Delete | SetData | Check


_WITH_DATA: Final = (Create, SetData)


def op_size(op: Op) -> int:
    """About how many bytes ``op`` adds to a transaction's packet."""
    # A tuple, not ``Create | SetData``: that builds a union object at every call.
    return len(op.path) + 32 + (len(op.data) if isinstance(op, _WITH_DATA) else 0)
