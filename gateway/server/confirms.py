"""Publisher confirms for one channel: acknowledged in publish order, coalesced with ``multiple``.

A confirm may only be sent once every earlier message on the channel is confirmed too (the
client treats ``ack(n, multiple=True)`` as "everything up to n"), so the messages wait in
publish order. While the next message is already stored, acks are held back and merged into
one ``multiple=True`` ack: under load that is one frame for many messages, as RabbitMQ does.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

import trio

from gateway.backend.interface import Stored
from gateway.observability.counters import Histogram

log = logging.getLogger("gateway.confirms")

# send(delivery_tag, multiple, ok): queue a Basic.Ack (ok) or Basic.Nack on the channel.
SendConfirm = Callable[[int, bool, bool], Awaitable[None]]

# Publish→confirm latency is timed for one message in SAMPLE_EVERY (a power of two): reading
# the clock twice per message would cost more than all the counting of the publish path, and
# a sample of thousands a second describes the distribution as well.
SAMPLE_EVERY = 16


class ConfirmQueue:
    def __init__(self, send: SendConfirm, latency: Histogram | None = None) -> None:
        """``latency``: where the sampled publish→confirm seconds go (none: not timed)."""
        self._send = send
        self._latency = latency
        self._sampled: dict[int, float] = {}
        self._waiting: deque[tuple[int, Stored]] = deque()
        self._arrived = trio.Event()
        self._next_seq = 1
        self._confirmed_upto = 0  # highest sequence number the client has been told about

    def add(self, stored: Stored) -> int:
        """Track the next published message; returns its sequence number (delivery tag)."""
        seq = self._next_seq
        self._next_seq += 1
        if not seq & (SAMPLE_EVERY - 1) and self._latency is not None:
            self._sampled[seq] = time.perf_counter()
        self._waiting.append((seq, stored))
        self._arrived.set()
        return seq

    async def run(self) -> None:
        """Send confirms until cancelled (when the channel closes)."""
        ok_upto = 0  # stored, not yet acked
        # The last ``Stored`` found durable: the messages of one grouped send share theirs
        # (gateway/pulsar/producer.py), and need not be awaited one by one.
        durable: Stored | None = None
        while True:
            if ok_upto and not (self._waiting and self._waiting[0][1].done()):
                await self._ack_upto(ok_upto)
                ok_upto = 0
            while not self._waiting:
                self._arrived = trio.Event()
                await self._arrived.wait()
            seq, stored = self._waiting[0]
            if stored is durable:
                self._waiting.popleft()
                ok_upto = seq
                continue
            try:
                await stored.durable()
            except Exception as error:
                log.warning("publish %d not stored: %s", seq, error)
                self._waiting.popleft()
                if ok_upto:
                    await self._ack_upto(ok_upto)
                self._observe(seq)
                await self._send(seq, False, False)
                self._confirmed_upto = seq
                ok_upto = 0
            else:
                self._waiting.popleft()
                ok_upto = seq
                durable = stored

    def _observe(self, upto: int) -> None:
        """Time the sampled messages up to ``upto``, now that their confirm goes out."""
        if self._sampled and self._latency is not None:
            now = time.perf_counter()
            for sampled in [s for s in self._sampled if s <= upto]:
                self._latency.observe(now - self._sampled.pop(sampled))

    async def _ack_upto(self, seq: int) -> None:
        self._observe(seq)
        multiple = seq - self._confirmed_upto > 1
        self._confirmed_upto = seq
        await self._send(seq, multiple, True)
