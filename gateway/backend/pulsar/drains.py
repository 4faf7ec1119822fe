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
and the namespace's leader removes the subscription once drained (leader/cleaner.py), whichever
replica did the unbind and whether it is still alive. ``Drains`` is a replica's index of them,
rebuilt from the view when it changes, for the per-message filter; ``plan_drains`` decides the
records an unbind (or an exchange's delete) writes.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.backend.pulsar.queue_topics import QueueTopics
from gateway.backend.pulsar.reply_codes import amqp_errors, to_amqp_error
from gateway.metadata.store import REMOVE, DrainRecord, Position, VhostView
from gateway.model.entities import Binding, ExchangeType
from gateway.model.graph import RouteSnapshot
from gateway.model.naming import decode_local_name, subscription_for
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.errors import AdminError, NotFound
from gateway.pulsar.ids import MessageId

__all__ = ["Drains", "Position", "judgement", "plan_drains", "position_of"]


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
    queue_topics: QueueTopics,
    admin: PulsarAdmin,
    before: VhostView,
    queues: Iterable[str],
    *,
    after: VhostView | None = None,
    without: Iterable[Binding] = (),
) -> tuple[dict[tuple[str, str], DrainRecord], list[tuple[str, str]]]:
    """A change takes the metadata from ``before`` to ``after`` (an unbind, an exchange's
    delete; or, cheaper when no topic's judging can change, ``before`` less the queue
    bindings ``without``). For each of ``queues`` and each topic it reads before and not
    after: a drain record (the subscription still holds messages routed before; they stay
    the queue's, and only messages past the topic's end *now* are filtered out) or, when it
    holds none, a ``REMOVE`` record, also listed second (to unsubscribe at once; the record
    is there in case we die first). Where the queue judges each message (headers, exchange
    bindings on the way: model/graph.py ``filtered``), the record keeps the bindings that
    routed what it drains (``DrainRecord.via``); so does a record for a topic the queue still
    reads when the bindings that judge it changed (an *end* without a window: ``resumed`` =
    ``end``). Positions are read before the change: a message published meanwhile is
    concurrent with it, and either outcome is one RabbitMQ could have had."""
    drains: dict[tuple[str, str], DrainRecord] = {}
    drained: list[tuple[str, str]] = []
    leaving = list(without)
    for queue in sorted(set(queues)):
        old = queue_topics.bound(before, queue)
        new = queue_topics.bound(after or before, queue, without=leaving)
        what = f"unbinding queue '{queue}'"
        for topic in sorted(old):
            kept = topic in new
            via = None if kept and after is None else judgement(queue_topics, before, queue, topic)
            if kept and (
                via is None or after is None or via == judgement(queue_topics, after, queue, topic)
            ):
                continue  # still read, and judged as before (without ``after``: by the caller)
            try:
                backlog = await admin.subscription_backlog(topic, subscription_for(queue))
            except NotFound:
                continue
            except AdminError as error:
                raise to_amqp_error(error, what) from None
            if backlog == 0 and not kept:
                drains[(queue, topic)] = REMOVE
                drained.append((queue, topic))
                continue
            if backlog == 0:
                continue  # nothing routed before is left to judge
            end = position_of(await amqp_errors(admin.last_message_id(topic), what))
            # What an earlier change left to judge comes first (older messages).
            known = before.drains.get((queue, queue_topics.local(topic)))
            judged = () if known is None else known.via
            if via is not None:
                judged = (*judged, (end, via))
            drains[(queue, topic)] = DrainRecord(end, end if kept else None, judged)
    return drains, drained


def judgement(
    queue_topics: QueueTopics, view: VhostView, queue: str, topic: str
) -> RouteSnapshot | None:
    """The bindings by which ``queue`` judges each message of ``topic`` in ``view``; None
    when every message there is the queue's (no headers binding, no exchange binding on the
    way that looks at the key)."""
    decoded = decode_local_name(queue_topics.local(topic))
    if decoded is None:
        return None
    catalog = queue_topics.catalog
    source = catalog.exchange(view, decoded[0])
    if source is None:
        return None
    keyed = decoded[1] is not None
    if not view.exchange_bindings and (keyed or source.type is not ExchangeType.HEADERS):
        return None
    graph = catalog.graph(view)
    bound_to = {binding.exchange for binding in queue_topics.bindings_of(view, queue)}
    if not graph.filtered(source, bound_to, keyed=keyed):
        return None
    return graph.snapshot(source, queue, bound_to)
