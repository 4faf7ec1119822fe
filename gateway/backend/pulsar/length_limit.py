"""Queue length limits on Pulsar (``x-max-length``, ``x-overflow``; rules: model/length_limit.py).

A queue's ready messages are counted from Pulsar, so every replica's publishes count: the
messages in the backlog of the queue's subscriptions (``analyzeBacklog``), less

- for ``reject-publish``: what this replica's clients hold unacknowledged (the count
  Queue.Declare-Ok reports). Messages other replicas' clients hold count as ready, so the
  queue may refuse early while they do, never take more than the limit;
- for the ``drop-head`` trim: everything Pulsar has dispatched to consumers and not seen
  acknowledged, on any replica. Messages read ahead but not yet handed to a client count as
  held, so the trim may leave the queue over the limit by that much, never drop a message
  RabbitMQ would have kept.

- ``reject-publish``/``reject-publish-dlx``, on the publishing replica: before writing, each
  routed queue with such a limit is asked whether it has room. The count is taken from Pulsar;
  under half the limit a count up to ``COUNT_FRESH`` seconds old, counted up by this replica's
  accepted publishes since, is used instead. Two replicas publishing at the same moment into
  the last free place may both take it (one message over the limit per such replica). A full
  queue refuses the message: it is not written if no other queue takes it, or written marked
  ``amqp-refused-by`` (the queue's consumers skip it); the publisher's confirm is a nack;
  ``reject-publish-dlx`` dead-letters it (reason ``maxlen``).
- ``drop-head``: the namespace's leader trims (leader/length_trim.py) every half second: the oldest
  messages beyond the limit are read from the queue's head, dead-lettered (reason ``maxlen``)
  if the queue says so, and acknowledged. One trimmer for the fleet, so no message is dropped
  twice over; between a burst and the next trim the queue may hold more than the limit.

``x-max-length-bytes`` is refused on classic and quorum queues (a stream's is its retention,
queue_types/stream/queues.py): RabbitMQ counts the body bytes of the ready messages, and Pulsar
knows only the sizes of whole entries (metadata, properties and batches included) in a
subscription's backlog, so no replica can tell the fleet's ready body bytes without reading every
message.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Final

import trio

from gateway.backend.interface import Message
from gateway.backend.pulsar.message_ttl import DeadLetter
from gateway.metadata.chunked import Picked
from gateway.metadata.store import VhostView
from gateway.model.entities import Queue
from gateway.model.length_limit import LengthLimit, length_limit
from gateway.model.naming import subscription_for
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.errors import NotFound

log = logging.getLogger("gateway.pulsar.length_limit")

__all__ = ["REFUSED_ARGUMENTS", "LengthLimits", "count_ready", "limits_in", "limits_picker"]

# The queue arguments this backend refuses (406 naming them), with why.
REFUSED_ARGUMENTS: Final = {
    "x-max-length-bytes": "not implemented by Starlight for RabbitMQ on Pulsar "
    "(the body bytes of a queue's ready messages are not known fleet-wide)"
}

# How old a queue's count may be when a reject-publish limit decides on it.
COUNT_FRESH = 0.25

# Counts a queue's ready messages, fleet-wide, from Pulsar.
CountReady = Callable[[str], Awaitable[int]]


async def count_ready(admin: PulsarAdmin, topics: Collection[str], queue: str) -> int:
    """The queue's messages in Pulsar less those dispatched and not acknowledged."""
    subscription = subscription_for(queue)
    total = 0
    for topic in sorted(topics):
        try:
            stats = await admin.topic_stats(topic)
        except NotFound:
            continue  # nothing was ever written there
        found = stats.subscriptions.get(subscription)
        if found is None or found.msg_backlog == 0:
            continue
        analysis = await admin.analyze_backlog(topic, subscription)
        total += max(0, analysis.messages - found.unacked_messages)
    return total


def _limit_of(queue: Queue) -> LengthLimit | None:
    return length_limit(queue.arguments)


def limits_in(view: VhostView) -> dict[str, LengthLimit]:
    """The length limits of the queues in ``view`` (a look at every queue: ``limits_picker``
    follows successive views at the cost of what changed)."""
    return {name: limit for name, q in view.queues.items() if (limit := _limit_of(q)) is not None}


def limits_picker() -> Picked[str, Queue, LengthLimit]:
    """The length limits of successive views' queues (``picker(view.queues)``), looking only
    at the queues that changed since the previous view (chunked.py)."""
    return Picked(_limit_of)


class LengthLimits:
    """One replica's view of a vhost's limits, for publishing."""

    def __init__(self, count_ready: CountReady, dead_letter: DeadLetter) -> None:
        self._count_ready = count_ready
        self._dead_letter = dead_letter
        self._limits: tuple[int, Mapping[str, LengthLimit]] = (-1, {})
        self._picker = limits_picker()
        # Per queue: (ready messages as last counted and counted up since, when counted).
        self._counts: dict[str, tuple[int, float]] = {}

    def of(self, view: VhostView) -> Mapping[str, LengthLimit]:
        """The limits of the view's queues (looked at again, where they changed, when the
        view changes: every declare elsewhere changes it)."""
        if self._limits[0] != view.version:
            self._limits = (view.version, self._picker(view.queues))
            self._counts = {q: c for q, c in self._counts.items() if q in self._limits[1]}
        return self._limits[1]

    async def refusing(
        self, limits: Mapping[str, LengthLimit], targets: Collection[str], message: Message
    ) -> list[str]:
        """The ``targets`` whose reject-publish limit refuses ``message`` (dead-lettered
        there if ``reject-publish-dlx``); the others count it."""
        refused = []
        for queue in sorted(targets):
            limit = limits.get(queue)
            if limit is None or not limit.rejects_publish:
                continue
            ready, counted = await self._ready(queue, limit)
            if limit.has_room(ready):
                self._counts[queue] = (ready + 1, counted)
                continue
            refused.append(queue)
            if limit.dead_letters_rejected:
                await self._dead_letter(queue, message, "maxlen")
        return refused

    async def _ready(self, queue: str, limit: LengthLimit) -> tuple[int, float]:
        """The queue's ready count: counted again unless a recent count (plus what this
        replica added since) is under half the limit, where publishes elsewhere meanwhile
        cannot plausibly fill it; near the limit, every publish counts (two admin calls per
        topic of the queue), so publishes on several replicas one after another are exact."""
        now = trio.current_time()
        known = self._counts.get(queue)
        maximum = limit.max_length or 0  # set: Pulsar refuses x-max-length-bytes alone
        if known is not None and now - known[1] < COUNT_FRESH and known[0] * 2 < maximum:
            return known
        counted = (await self._count_ready(queue), now)
        self._counts[queue] = counted
        return counted
