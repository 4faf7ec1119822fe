"""Which messages a closing consumer must settle so that Pulsar does not send a batch again.

A broker that acknowledges whole entries (``acknowledgmentAtBatchIndexLevelEnabled=false``,
Pulsar's default) dispatches a producer batch, one entry, whole to one consumer, and forgets
it only once every message of it is acknowledged; pulsar-client sends that acknowledgement
when the last message of the batch is acknowledged. A consumer that closes after its client
acknowledged part of a batch (or requeued it: a copy, then the original acknowledged,
delivery.py) while the rest was read ahead and never delivered makes Pulsar dispatch the whole
entry again: the acknowledged messages come back, a second time. The gateway reads ahead
whatever its client's prefetch allows, so a channel closed between two deliveries of one batch
got there (found by the settlement property test).

So before such a consumer closes, the rest of each batch it took part of is moved: a copy goes
to the queue's own topic and the original is acknowledged, which completes the entry. Only when
the whole rest is still in the gateway's hands: the batch's last message is among what it read
ahead, or was taken itself (a priority consumer takes out of order: a Basic.Get took the
highest priority, the last of its batch, and the Java client's next consumer got it again);
messages arrive in order, so all of the batch came. What pulsar-client's receiver queue still
holds cannot be acknowledged, and the entry comes back with it anyway (docs/compatibility.md,
"Settlement"). An entry nothing of which was taken is left alone: it comes back whole, in its
place, unless it lies after a moved one.

A copy goes to the end of the queue's topic, and the messages read ahead after the moved ones
would come back in their places, ahead of it: the moved messages would lose their place among
what was read with them (a Basic.Get consumer of a priority queue, which reads the queue, took
one message of a batch; the consumer after it got messages of one priority out of their
order). So everything read ahead after the first moved message of a topic is moved with it,
all in their order in the topic (``moved_in_order``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.pulsar.ids import BatchPosition, completes_batch

NOTHING_TAKEN: Mapping[str, BatchPosition] = {}


def rests_of_split_entries(
    unreceived: Sequence[tuple[str, BatchPosition]],
    taken: Mapping[str, BatchPosition] = NOTHING_TAKEN,
) -> list[int]:
    """Of messages read ahead and never delivered (each its topic and batch position, in the
    order they arrived), the numbers of those to move: every message of an entry part of which
    was taken, when all of the entry arrived (so what is missing was taken): its last message
    is among them, or ``taken`` (per topic, the furthest message taken) is it or lies after
    it."""
    by_entry: dict[tuple[str, tuple[int, int, int]], list[int]] = {}
    for number, (topic, position) in enumerate(unreceived):
        if position.batch_size > 1 and position.batch_index >= 0:
            by_entry.setdefault((topic, position.entry), []).append(number)
    rests: list[int] = []
    for numbers in by_entry.values():
        topic, position = unreceived[numbers[0]]
        size = position.batch_size
        indexes = {unreceived[number][1].batch_index for number in numbers}
        furthest = taken.get(topic)
        arrived = size - 1 in indexes or (
            furthest is not None and completes_batch(furthest, position)
        )
        if arrived and len(indexes) < size:
            rests.extend(numbers)
    return sorted(rests)


def moved_in_order(
    unreceived: Sequence[tuple[str, BatchPosition]],
    taken: Mapping[str, BatchPosition] = NOTHING_TAKEN,
) -> list[int]:
    """``rests_of_split_entries``, and with them every message of the same topic that lies
    after the first of them, in their order in the topic (topic by topic)."""
    rests = rests_of_split_entries(unreceived, taken)
    first: dict[str, tuple[tuple[int, int, int], int]] = {}
    for number in rests:
        topic, position = unreceived[number]
        place = (position.entry, position.batch_index)
        if topic not in first or place < first[topic]:
            first[topic] = place

    def place_of(number: int) -> tuple[str, tuple[int, int, int], int]:
        topic, position = unreceived[number]
        return topic, position.entry, position.batch_index

    return sorted(
        (
            number
            for number, (topic, position) in enumerate(unreceived)
            if topic in first and (position.entry, position.batch_index) >= first[topic]
        ),
        key=place_of,
    )
