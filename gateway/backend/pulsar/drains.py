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
rebuilt from the view when it changes, for the per-message filter; ``plan_drains`` decides the
records an unbind (or an exchange's delete) writes.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.backend.pulsar.queue_topics import QueueTopics
from gateway.metadata.store import REMOVE, DrainRecord, Position, VhostView
from gateway.model.entities import Binding
from gateway.model.naming import subscription_for
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.errors import AdminError, NotFound, amqp_errors, to_amqp_error
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


async def plan_drains(
    queue_topics: QueueTopics, admin: PulsarAdmin, view: VhostView, bindings: Iterable[Binding]
) -> tuple[dict[tuple[str, str], DrainRecord], list[tuple[str, str]]]:
    """``bindings`` are about to go: for each (queue, topic) that no other binding of the
    queue needs any more, a drain record (the subscription still holds messages routed
    before; they stay the queue's, and only messages past the topic's end *now* are
    filtered out) or, when it holds none, a ``REMOVE`` record, also listed second (to
    unsubscribe at once; the record is there in case we die first). Positions are read
    before the bindings go: a message published meanwhile is concurrent with the unbind,
    and either outcome is one RabbitMQ could have had."""
    leaving = list(bindings)
    drains: dict[tuple[str, str], DrainRecord] = {}
    drained: list[tuple[str, str]] = []
    for queue in {b.queue for b in leaving}:
        still_needed = queue_topics.bound(view, queue, without=leaving)
        topics = {
            topic
            for binding in leaving
            if binding.queue == queue
            for topic in queue_topics.live_of_binding(view, binding)
        }
        for topic in sorted(topics - still_needed):
            what = f"unbinding queue '{queue}'"
            try:
                backlog = await admin.subscription_backlog(topic, subscription_for(queue))
            except NotFound:
                continue
            except AdminError as error:
                raise to_amqp_error(error, what) from None
            if backlog == 0:
                drains[(queue, topic)] = REMOVE
                drained.append((queue, topic))
                continue
            end = await amqp_errors(admin.last_message_id(topic), what)
            drains[(queue, topic)] = DrainRecord(position_of(end))
    return drains, drained
