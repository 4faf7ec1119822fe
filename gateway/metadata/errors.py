"""Errors of the metadata store beyond ``MetadataUnavailable`` (store.py)."""

from __future__ import annotations

__all__ = ["MissingEntity"]


class MissingEntity(LookupError):
    """A binding names a queue or an exchange that is not in the store (deleted meanwhile,
    perhaps by another replica). The caller answers 404 for ``kind`` ``name``, as RabbitMQ
    does for Queue.Bind to a missing queue or exchange."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"no {kind} '{name}' in the metadata store")
        self.kind = kind
        self.name = name
