"""What every duty of a namespace's leader works on, given once (namespace_leader.py)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.metadata.store import MetadataStore
from gateway.pulsar.admin import PulsarAdmin

__all__ = ["LeaderDuty", "LeaderScope"]


@dataclass(frozen=True)
class LeaderScope:
    """The namespace a leader leads: its vhost on this replica, the metadata store, Pulsar's
    admin API, and the namespace's name in the store."""

    vhost: PulsarVirtualHost
    store: MetadataStore
    admin: PulsarAdmin
    namespace: str


class LeaderDuty:
    """One duty of the leader (the cleaner, a sweep, the stream feed …) over its scope."""

    def __init__(self, scope: LeaderScope) -> None:
        self._vhost = scope.vhost
        self._store = scope.store
        self._admin = scope.admin
        self._namespace = scope.namespace
