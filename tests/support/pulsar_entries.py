"""How messages lie in a topic's entries, read with the raw pulsar-client: which of them a
producer batched together. A test of per-message settlement inside batches proves nothing
unless the messages it settles really share entries."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulsar


@dataclass
class Entry:
    """One Pulsar entry: a producer batch (``batch``: its messages have batch indexes, even a
    batch of one) or a lone message."""

    batch: bool
    bodies: list[bytes] = field(default_factory=list)


def entries_of(broker_url: str, topic: str, count: int, timeout_ms: int = 15_000) -> list[Entry]:
    """The first ``count`` messages of ``topic`` (from the earliest, with a reader: no
    subscription is touched), grouped by the entry that holds them, in topic order."""
    client = pulsar.Client(broker_url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        entries: dict[tuple[int, int], Entry] = {}
        for _ in range(count):
            message = reader.read_next(timeout_millis=timeout_ms)
            place = message.message_id()
            key = (place.ledger_id(), place.entry_id())
            entry = entries.setdefault(key, Entry(batch=place.batch_index() >= 0))
            entry.bodies.append(message.data())
        reader.close()
        return list(entries.values())
    finally:
        client.close()


def entry_holding(entries: list[Entry], body: bytes) -> Entry:
    return next(entry for entry in entries if body in entry.bodies)
