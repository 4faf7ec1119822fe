"""AMQP's ``redelivered`` across replicas: each replica's record of its deliveries, fleet-wide.

The AMQP 0-9-1 spec has Basic.Deliver's ``redelivered`` say that "this message may have been
previously delivered to this or another client", and RabbitMQ sets it on every message that
went back to its queue because its consumer's channel or connection closed. A replica
remembers what it delivered (redeliveries.py), but when it stops or is killed Pulsar hands its
unacknowledged messages to consumers on other replicas *uncounted*: Pulsar 4.0.8's Shared
dispatcher replays a removed consumer's pending messages without raising their redelivery
count, and forgets every count once a subscription's last consumer is gone. So:

* every replica keeps, per vhost, a **record** in the metadata store (one node per replica:
  docs/metadata.md) of what it delivered and has not seen settled: queue, topic and message
  id, written by ``DeliveryRecord`` at most once per ``RECORD_INTERVAL`` and only when a
  delivery has stayed unsettled for a whole interval (a consumer that acks within it causes
  no write at all);
* every replica follows the others' records (a watch) and marks a message it delivers
  ``redelivered`` when one of them holds it (``Redeliveries.elsewhere``: one set lookup);
* a consumer that gave messages back (Basic.Reject/Nack with requeue, or a channel, a
  connection or the replica closing with unacknowledged messages) waits, before its Pulsar
  consumer closes, until the record holds them (``flush``) and until pulsar-client has sent
  its negative acknowledgements (it drops unsent ones on close): the broker then counts the
  redelivery when another consumer is there to take it, with no race against the watch;
* the leader of a namespace removes the records of replicas gone for a day
  (leader/delivery_record_pruner.py).

What is not covered: a replica killed (SIGKILL, OOM, lost host) less than about two
intervals after a delivery (its record did not hold it yet), and deliveries beyond the newest
``RECORD_LIMIT`` of a replica. Those come back with ``redelivered=false``, as before. A record
never marks a message that was not delivered.
"""

from __future__ import annotations

import base64
import json
import logging
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Final

import trio

from gateway.backend.pulsar.redeliveries import Key, Redeliveries
from gateway.metadata.roles import Deliveries
from gateway.metadata.store import MetadataUnavailable
from gateway.pulsar.consumer import ConsumerOptions

log = logging.getLogger("gateway.pulsar.delivery_records")

__all__ = [
    "DeliveryRecord",
    "decode_record",
    "encode_record",
]

# How often the writer looks at what is outstanding (a delivery is written once it has been
# outstanding for one to two of these).
RECORD_INTERVAL: Final = 0.2
# The most deliveries a record holds (the newest), and its most bytes: ZooKeeper refuses a
# node over 1 MB (jute.maxbuffer).
RECORD_LIMIT: Final = 20_000
RECORD_BYTES: Final = 512 * 1024
# A record that only lost settled deliveries is written again after this many intervals
# (it only grows stale meanwhile: a settled message never comes back).
SHRINK_EVERY: Final = 25
# How long a closing consumer waits for the record, and a new consumer for the first read
# of the others' records, before going on without (ZooKeeper unreachable).
FLUSH_WAIT: Final = 2.0
READY_WAIT: Final = 5.0
# pulsar-client sends negative acknowledgements from a timer, at most a third of the
# redelivery delay after it (delay at least 100 ms), and forgets unsent ones on close.
NACKS_SENT_AFTER: Final = ConsumerOptions().negative_ack_redelivery_delay_ms * 1.5 / 1000 + 0.02
# A decompressed record larger than this is refused (no record of ours comes near it).
_MAX_DECODED: Final = 64 * 1024 * 1024
_VERSION: Final = 1


def encode_record(keys: Iterable[Key]) -> bytes:
    """A record of ``keys``: zlib-compressed JSON ``{"v":1,"d":[[queue, topic, ids]]}``, one
    entry per (queue, topic), ``ids`` the base64 message ids separated by spaces."""
    grouped: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    for queue, topic, message_id in keys:
        grouped[(queue, topic)].append(base64.b64encode(message_id).decode("ascii"))
    document = {
        "v": _VERSION,
        "d": [[queue, topic, " ".join(ids)] for (queue, topic), ids in grouped.items()],
    }
    return zlib.compress(json.dumps(document, separators=(",", ":")).encode(), 6)


def decode_record(data: bytes) -> frozenset[Key]:
    """The keys of a record; ValueError for anything ``encode_record`` would not write."""
    try:
        inflater = zlib.decompressobj()
        text = inflater.decompress(data, _MAX_DECODED)
        if inflater.unconsumed_tail or not inflater.eof:
            raise ValueError("a delivery record too large or truncated")
        document = json.loads(text)
        if not isinstance(document, dict) or document.get("v") != _VERSION:
            raise ValueError("not a delivery record of version 1")
        keys: set[Key] = set()
        for queue, topic, ids in document["d"]:
            if not (isinstance(queue, str) and isinstance(topic, str) and isinstance(ids, str)):
                raise ValueError("a malformed delivery record")
            keys.update(
                (queue, topic, base64.b64decode(one, validate=True)) for one in ids.split(" ")
            )
        return frozenset(keys)
    except (zlib.error, UnicodeDecodeError, TypeError, KeyError, ValueError) as error:
        raise ValueError(f"not a delivery record: {error}") from None


def _bounded(keys: list[Key]) -> bytes:
    """The record of as many of ``keys`` (newest first) as fit in RECORD_BYTES."""
    while True:
        data = encode_record(keys)
        if len(data) <= RECORD_BYTES or len(keys) <= 1:
            return data
        keys = keys[: len(keys) // 2]


class DeliveryRecord:
    """This replica's record in one vhost, written from its ``Redeliveries``, and the other
    replicas' records, followed into ``Redeliveries.elsewhere``, once started."""

    def __init__(
        self,
        store: Deliveries,
        namespace: str,
        redeliveries: Redeliveries,
        *,
        interval: float = RECORD_INTERVAL,
    ) -> None:
        self._store = store
        self._namespace = namespace
        self._redeliveries = redeliveries
        self._interval = interval
        self.running = False
        # Set once the others' records were read (or could not be: the store closed).
        self.loaded = trio.Event()
        # A flush asked for, and the event of the write that answers it.
        self._wanted = trio.Event()
        self._flushed = trio.Event()
        # Whether the store holds a record of ours (an empty one is removed, not written).
        self._stored = False
        # Replica -> (its record as read, the keys in it), and how many records hold each key
        # (``Redeliveries.elsewhere`` is this dict).
        self._known: dict[str, tuple[bytes, frozenset[Key]]] = {}
        self._elsewhere: dict[Key, int] = {}
        redeliveries.elsewhere = self._elsewhere

    def start(self, nursery: trio.Nursery) -> None:
        """Write and follow the records in ``nursery`` from now on (``ready`` and ``flush``
        wait for it once this has been called)."""
        self.running = True
        nursery.start_soon(self._run)

    async def _run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._follow)
                await self._write_loop()
        finally:
            self.running = False
            self.loaded.set()

    async def ready(self) -> None:
        """Until the other replicas' records are known (a consumer that starts before would
        miss their marks), at most READY_WAIT."""
        if self.running:
            with trio.move_on_after(READY_WAIT):
                await self.loaded.wait()

    async def flush(self) -> None:
        """Until the record holds everything delivered so far, at most FLUSH_WAIT."""
        if not self.running:
            return
        done = self._flushed
        self._wanted.set()
        with trio.move_on_after(FLUSH_WAIT):
            await done.wait()

    async def returned(self, last_nack: float) -> None:
        """Before a consumer that gave messages back closes (its last negative
        acknowledgement at ``last_nack``, trio time): the record holds them, and
        pulsar-client has sent the negative acknowledgements (the broker counts them)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.flush)
            await trio.sleep_until(last_nack + NACKS_SENT_AFTER)

    # ------------------------------------------------------------------ writing

    async def _write_loop(self) -> None:
        rounds = 0
        redeliveries = self._redeliveries
        while True:
            with trio.move_on_after(self._interval):
                await self._wanted.wait()
            rounds += 1
            flushing = self._wanted.is_set()
            if flushing:
                self._wanted = trio.Event()
                done, self._flushed = self._flushed, trio.Event()
            due = redeliveries.tick()
            shrink = redeliveries.shrunk and rounds % SHRINK_EVERY == 0
            if due or shrink or (flushing and (redeliveries.unrecorded() or redeliveries.shrunk)):
                await self._write()
            if flushing:
                done.set()

    async def _write(self) -> None:
        keys, mark = self._redeliveries.snapshot(RECORD_LIMIT)
        if not keys and not self._stored:
            self._redeliveries.recorded(mark)
            return
        record = _bounded(keys) if keys else None
        try:
            await self._store.record_deliveries(self._namespace, record)
        except MetadataUnavailable as error:
            # Tried again next interval (the deliveries are still not recorded).
            log.debug("recording deliveries in %s: %s", self._namespace, error)
            return
        except Exception:
            log.warning("recording deliveries in %s failed", self._namespace, exc_info=True)
            return
        self._redeliveries.recorded(mark)
        self._stored = record is not None

    # ------------------------------------------------------------------ following

    async def _follow(self) -> None:
        while True:
            try:
                await self._store.follow_deliveries(self._namespace, self._update)
                return  # the store closed
            except MetadataUnavailable as error:
                log.debug("following delivery records in %s: %s", self._namespace, error)
            except Exception:
                log.warning(
                    "following delivery records in %s failed", self._namespace, exc_info=True
                )
            await trio.sleep(1.0)

    def _update(self, records: Mapping[str, bytes]) -> None:
        """The others' records as read now: only those that changed are decoded, and only
        their difference touches ``elsewhere`` (a record can hold thousands of deliveries)."""
        counts = self._elsewhere
        known: dict[str, tuple[bytes, frozenset[Key]]] = {}
        for replica in self._known.keys() | records.keys():
            before = self._known.get(replica)
            data = records.get(replica)
            if before is not None and before[0] == data:
                known[replica] = before
                continue
            keys: frozenset[Key] = frozenset()
            if data is not None:
                try:
                    keys = decode_record(data)
                except ValueError as error:
                    log.warning("ignoring the delivery record of %s: %s", replica, error)
                known[replica] = (data, keys)
            old = frozenset() if before is None else before[1]
            for key in old - keys:
                left = counts[key] - 1
                if left:
                    counts[key] = left
                else:
                    del counts[key]
            for key in keys - old:
                counts[key] = counts.get(key, 0) + 1
        self._known = known
        self.loaded.set()
