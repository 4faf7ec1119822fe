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
    admin API, and the namespace's name in the store.

    The scope holds the whole store, as the leader was given it; each duty keeps only the
    roles it uses (``self._store: Views = scope.store`` in its ``__init__``), so that its
    annotation says what it reads and writes of the store, and mypy holds it to that."""

    vhost: PulsarVirtualHost
    store: MetadataStore
    admin: PulsarAdmin
    namespace: str


class LeaderDuty:
    """One duty of the leader (the cleaner, a sweep, the stream feed …) over its scope. A duty
    that uses the metadata store takes it from the scope, typed with its roles."""

    def __init__(self, scope: LeaderScope) -> None:
        self._vhost = scope.vhost
        self._admin = scope.admin
        self._namespace = scope.namespace
