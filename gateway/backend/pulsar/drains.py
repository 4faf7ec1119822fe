"""Subscriptions that outlive their binding until what was routed before the unbind is consumed.

In RabbitMQ a message routed to a queue stays there whatever happens to the binding that
routed it. The reference design keeps that promise on Pulsar: after an unbind the queue's
subscription on the topic lives on, the queue's consumers keep reading it, messages past the
topic's end at the unbind are filtered out, and the subscription is removed once its backlog
is empty (reference/000-002, "When you unbind the Queue ...").

If the queue is bound to the topic again while it drains, messages written after the rebind
are the queue's again; only the unbound window is skipped.

The records are in the metadata store (``DrainRecord``, written in the same transaction as the
unbind), so every replica's consumers of the queue read and filter the draining topic alike,
and the namespace's leader removes the subscription once drained (cleaner.py), whichever
replica did the unbind and whether it is still alive. ``Drains`` is a replica's index of them,
rebuilt from the view when it changes, for the per-message filter.
"""

from __future__ import annotations

from gateway.metadata.store import DrainRecord, Position, VhostView
from gateway.pulsar.ids import MessageId

__all__ = ["Drains", "Position", "position_of"]


def position_of(message_id: MessageId) -> Position:
    # Positions compare by (ledger, entry): every message of the last entry at the unbind was
    # written before it, whatever its index inside a batch.
    return (message_id.ledger_id, message_id.entry_id)


class Drains:
    """The draining (queue, topic) pairs of one vhost, by full topic name, as of one view.

    Records being removed (``DrainRecord.removing``) are left out: nobody reads those topics
    any more."""

    def __init__(self, topic_prefix: str) -> None:
        # "persistent://tenant/ns/": the records name topics by their local name.
        self._prefix = topic_prefix
        self._drains: dict[tuple[str, str], DrainRecord] = {}
        self._source: object = None

    def __bool__(self) -> bool:
        return bool(self._drains)

    def refresh(self, view: VhostView) -> None:
        """Follow ``view`` (cheap when its drain records did not change: the view keeps the
        same mapping object until they do)."""
        if view.drains is self._source:
            return
        self._source = view.drains
        self._drains = {
            (queue, self._prefix + topic): record
            for (queue, topic), record in view.drains.items()
            if not record.removing
        }

    def get(self, queue: str, topic: str) -> DrainRecord | None:
        return self._drains.get((queue, topic))

    def topics_of(self, queue: str) -> set[str]:
        return {topic for (q, topic) in self._drains if q == queue}
