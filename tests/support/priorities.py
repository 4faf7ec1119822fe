"""RabbitMQ's order of a priority queue's backlog, and a mix of priorities to check it with
(docs/priority.md, ``rabbit_priority_queue``)."""

from __future__ import annotations

# (body, priority property): a mix with missing priorities, ties and the maximum.
MIX: list[tuple[str, int | None]] = [
    ("a", None),
    ("b", 1),
    ("c", 5),
    ("d", 10),
    ("e", 5),
    ("f", None),
    ("g", 3),
    ("h", 10),
    ("i", 1),
    ("j", 0),
    ("k", 7),
    ("l", 3),
]


def rabbitmq_order(messages: list[tuple[str, int | None]], maximum: int) -> list[str]:
    """The order RabbitMQ delivers a backlog in: highest (capped) priority first, FIFO within."""

    def effective(priority: int | None) -> int:
        return min(priority or 0, maximum)

    ranked = sorted(enumerate(messages), key=lambda item: (-effective(item[1][1]), item[0]))
    return [body for _index, (body, _priority) in ranked]
