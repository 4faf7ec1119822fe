"""Subscriptions that outlive their binding until what was routed before the unbind is consumed.

In RabbitMQ a message routed to a queue stays there whatever happens to the binding that
routed it. The reference design keeps that promise on Pulsar: after an unbind the queue's
subscription on the topic lives on, the queue's consumers keep reading it, messages past the
topic's end at the unbind are filtered out, and the subscription is removed once its backlog
is empty (reference/000-002, "When you unbind the Queue ...").

If the queue is bound to the topic again while it drains, messages written after the rebind
are the queue's again; only the unbound window is skipped.

The records are this replica's: a replica that restarts forgets them, and its consumers, which
follow the bindings, simply stop reading such a topic (the fleet's cleaner removes what is left).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.pulsar.ids import MessageId

# Positions compare by (ledger, entry): every message of the last entry at the unbind was
# written before it, whatever its index inside a batch.
Position = tuple[int, int]


def position_of(message_id: MessageId) -> Position:
    return (message_id.ledger_id, message_id.entry_id)


@dataclass
class Drain:
    end: Position  # the topic's last entry when the binding went
    resumed: Position | None = None  # the topic's last entry when the queue was bound again

    def excludes(self, position: Position) -> bool:
        """Whether a message at ``position`` was written while the queue was not bound."""
        return position > self.end and (self.resumed is None or position <= self.resumed)


class Drains:
    """The draining (queue, topic) pairs of one vhost."""

    def __init__(self) -> None:
        self._drains: dict[tuple[str, str], Drain] = {}

    def __bool__(self) -> bool:
        return bool(self._drains)

    def start(self, queue: str, topic: str, end: MessageId) -> None:
        self._drains[(queue, topic)] = Drain(position_of(end))

    def rebound(self, queue: str, topic: str, last: MessageId) -> None:
        drain = self._drains.get((queue, topic))
        if drain is not None and drain.resumed is None:
            drain.resumed = position_of(last)

    def get(self, queue: str, topic: str) -> Drain | None:
        return self._drains.get((queue, topic))

    def topics_of(self, queue: str) -> set[str]:
        return {topic for (q, topic) in self._drains if q == queue}

    def items(self) -> list[tuple[tuple[str, str], Drain]]:
        return list(self._drains.items())

    def finish(self, queue: str, topic: str) -> None:
        self._drains.pop((queue, topic), None)

    def forget_queue(self, queue: str) -> None:
        for key in [key for key in self._drains if key[0] == queue]:
            del self._drains[key]
