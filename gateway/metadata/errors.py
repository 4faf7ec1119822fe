"""Errors of the metadata store beyond ``MetadataUnavailable`` (store.py)."""

from __future__ import annotations

__all__ = ["ConditionNotMet", "ConsumerConflict", "MissingEntity"]


class MissingEntity(LookupError):
    """A binding names a queue or an exchange that is not in the store (deleted meanwhile,
    perhaps by another replica). The caller answers 404 for ``kind`` ``name``, as RabbitMQ
    does for Queue.Bind to a missing queue or exchange."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"no {kind} '{name}' in the metadata store")
        self.kind = kind
        self.name = name


class ConditionNotMet(Exception):
    """A conditional delete found its condition false when it was about to delete (checked
    in the same ZooKeeper transaction as the delete, so it holds fleet-wide): the queue has a
    consumer somewhere (``if_unused``), the exchange still has a binding, the exclusive queue's
    owner is alive, the auto-delete queue never had a consumer. Nothing was deleted."""

    def __init__(self, kind: str, name: str, why: str) -> None:
        super().__init__(f"{kind} '{name}' was kept: {why}")
        self.kind = kind
        self.name = name
        self.why = why


class ConsumerConflict(Exception):
    """An exclusive consumer was asked for while the queue has consumers (on any replica), or
    a consumer while another holds the queue exclusively: RabbitMQ answers 403
    ACCESS_REFUSED "queue '...' in vhost '...' in exclusive use"."""

    def __init__(self, queue: str) -> None:
        super().__init__(f"queue '{queue}' is in exclusive use")
        self.queue = queue
