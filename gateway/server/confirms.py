"""Publisher confirms for one channel: acknowledged in publish order, coalesced with ``multiple``.

A confirm may only be sent once every earlier message on the channel is confirmed too (the
client treats ``ack(n, multiple=True)`` as "everything up to n"), so the messages wait in
publish order. While the next message is already stored, acks are held back and merged into
one ``multiple=True`` ack: under load that is one frame for many messages, as RabbitMQ does.

Where the confirms are sent from: a Pulsar send handle (gateway/pulsar/producer.py) reports
its outcome to done-callbacks, which run on the trio thread as its receipt is drained. The
queue registers one on the handle at its head, and that callback sends the confirms and
writes them to the socket at once (``Output.flush_now``). A publisher waiting for each
confirm then gets it one pass of trio's run loop sooner than through a task woken by the
receipt (~0.05 ms of a lone message's confirm on the 2-core VM; docs/benchmarks.md,
"Synchronous patterns"). Any other ``Stored`` (one write for several queues, a refusal by a
full queue), and a flush that would have to wait for the writer, are left to the queue's
task.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import trio

from gateway.backend.interface import AlreadyStored, Stored, done_callbacks
from gateway.observability.counters import Histogram

log = logging.getLogger("gateway.confirms")

# send(delivery_tag, multiple, ok): put a Basic.Ack (ok) or Basic.Nack in the connection's
# output; ``Output`` writes it.
SendConfirm = Callable[[int, bool, bool], None]

# Publish→confirm latency is timed for one message in SAMPLE_EVERY (a power of two): reading
# the clock twice per message would cost more than all the counting of the publish path, and
# a sample of thousands a second describes the distribution as well.
SAMPLE_EVERY = 16


class Output(Protocol):
    """Where the confirms go out: the connection (server/connection.py)."""

    def flush_now(self) -> bool:
        """Write the output without waiting; False, with nothing taken, if that would wait."""
        ...

    async def flush(self) -> None: ...


class ConfirmQueue:
    def __init__(self, send: SendConfirm, output: Output, latency: Histogram | None = None) -> None:
        """``latency``: where the sampled publish→confirm seconds go (none: not timed)."""
        self._send = send
        self._output = output
        self._latency = latency
        self._sampled: dict[int, float] = {}
        self._waiting: deque[tuple[int, Stored]] = deque()
        self._next_seq = 1
        self._confirmed_upto = 0  # highest sequence number the client has been told about
        # Stored, and held back while the next message's outcome is known too (one ack).
        self._ok_upto = 0
        # The last ``Stored`` found durable: the messages of one grouped send share theirs
        # (gateway/pulsar/producer.py), and need not be looked at one by one.
        self._durable: Stored | None = None
        # The ``Stored`` whose done-callback is registered (once each).
        self._watched: Stored | None = None
        self._unflushed = False  # confirms sent to the output and not written yet
        self._work = trio.Event()  # the task has something to do
        self._scope = trio.CancelScope()  # cancelled by ``close``

    def add(self, stored: Stored) -> int:
        """Track the next published message; returns its sequence number (delivery tag)."""
        seq = self._next_seq
        self._next_seq += 1
        if not seq & (SAMPLE_EVERY - 1) and self._latency is not None:
            self._sampled[seq] = time.perf_counter()
        self._waiting.append((seq, stored))
        # The task confirms it: after the publishes of this read, so that a message stored
        # at once (routed nowhere) is coalesced with them.
        self._work.set()
        return seq

    def close(self) -> None:
        """The channel is closing: no more confirms."""
        self._scope.cancel()

    async def run(self) -> None:
        """Send the confirms that callbacks do not, until ``close``."""
        with self._scope:
            while True:
                self._work = trio.Event()
                self._confirm_ready()
                if self._head_needs_task():
                    await self._await_head(self._waiting[0][1])
                    continue
                if self._unflushed:
                    self._unflushed = False
                    await self._output.flush()
                    continue
                await self._work.wait()

    def _stored(self, stored: Any) -> None:
        """Done-callback of the head's send handle: in the producer's drain (trio thread)."""
        if self._scope.cancel_called:
            return  # closed
        self._confirm_ready()
        if self._head_needs_task():
            self._work.set()
        if self._unflushed:
            if self._output.flush_now():
                self._unflushed = False
            else:
                self._work.set()

    def _head_needs_task(self) -> bool:
        """Whether the first message waiting is one only the task can confirm: its ``Stored``
        reports to no callback, or is done already with an outcome only ``durable`` tells
        (``_confirm_ready`` leaves no other done head). Otherwise its callback is set."""
        if not self._waiting:
            return False
        head = self._waiting[0][1]
        return head.done() or not self._watch(head)

    def _watch(self, head: Stored) -> bool:
        """Have the head's handle call back when done; False if it cannot (the task waits)."""
        if head is self._watched:
            return True
        report = done_callbacks(head)
        if report is None:
            return False
        self._watched = head
        report(self._stored)
        return True

    def _confirm_ready(self) -> None:
        """Confirm the messages at the head whose outcome is known now, without waiting."""
        waiting = self._waiting
        while waiting:
            seq, stored = waiting[0]
            if stored is not self._durable:
                if not stored.done():
                    break
                outcome = _outcome_now(stored)
                if isinstance(outcome, _Unknown):
                    return  # the task awaits it, the ack held back meanwhile (it is done)
                if outcome is not None:
                    waiting.popleft()
                    self._nack(seq, outcome)
                    continue
                self._durable = stored
            waiting.popleft()
            self._ok_upto = seq
        self._ack_held()

    async def _await_head(self, head: Stored) -> None:
        """A head whose outcome only ``durable`` tells."""
        try:
            await head.durable()
        except Exception as error:
            seq, _ = self._waiting.popleft()
            self._nack(seq, error)
        else:
            self._durable = head

    def _observe(self, upto: int) -> None:
        """Time the sampled messages up to ``upto``, now that their confirm goes out."""
        if self._sampled and self._latency is not None:
            now = time.perf_counter()
            for sampled in [s for s in self._sampled if s <= upto]:
                self._latency.observe(now - self._sampled.pop(sampled))

    def _ack_held(self) -> None:
        """Ack the stored messages held back (``_ok_upto``), in one frame."""
        seq = self._ok_upto
        if seq:
            self._ok_upto = 0
            self._observe(seq)
            multiple = seq - self._confirmed_upto > 1
            self._confirmed_upto = seq
            self._send(seq, multiple, True)
            self._unflushed = True

    def _nack(self, seq: int, error: BaseException) -> None:
        """A message not stored: nacked alone (a message after it may have been stored),
        after the acks of those before it."""
        self._ack_held()
        log.warning("publish %d not stored: %s", seq, error)
        self._observe(seq)
        self._confirmed_upto = seq
        self._send(seq, False, False)
        self._unflushed = True


class _Unknown:
    """A done ``Stored`` whose outcome only ``durable`` tells."""


_UNKNOWN = _Unknown()


def _outcome_now(stored: Stored) -> BaseException | _Unknown | None:
    """A done ``Stored``'s error (None: stored), if known without awaiting it: a Pulsar send
    handle's, or a message routed nowhere."""
    if type(stored) is AlreadyStored:
        return None
    if done_callbacks(stored) is None:
        return _UNKNOWN
    error: BaseException | None = getattr(stored, "error", None)
    return error
