"""Sending a producer's collected group once the task that collected it yields.

A publisher channel submits the messages of one socket read to a producer one after another,
and the producer hands them to pulsar-client as one group (producer.py, "Grouped sends"): the
group has to go out as soon as the submitting task yields, not before and not later. It used
to be ``TrioToken.run_sync_soon``, which on the trio thread itself costs a byte written to
trio's wake-up socket, an extra pass of the I/O manager to see it and two reads to empty it,
and runs the send only once that pass has rescheduled trio's entry-queue task: measured with
strace at 200 msg/s, the message reached pulsar-client ~0.5 ms after its socket read on that
path against ~0.23 ms when sent at once.

One system task per trio run does it instead: ``schedule`` (trio thread only) records the
producer and reschedules the task if it is parked, with no system call. The task runs in the
scheduler's next batch: the submitting task, which runs on without yielding until it has
submitted the rest of its read, has by then added all of it to the group.
"""

from __future__ import annotations

import logging
from typing import Protocol

import trio

log = logging.getLogger(__name__)


class GroupSender(Protocol):
    def _send_group(self) -> None:
        """Hand the collected group (if any) to pulsar-client; never raises."""


class GroupFlusher:
    """The system task that sends the groups scheduled during a step of the trio loop."""

    def __init__(self) -> None:
        self._due: list[GroupSender] = []
        self._parked: trio.lowlevel.Task | None = None
        trio.lowlevel.spawn_system_task(self._run, name="pulsar producer group flusher")

    def schedule(self, producer: GroupSender) -> None:
        """Send ``producer``'s group once the current task yields (on the trio thread)."""
        self._due.append(producer)
        task, self._parked = self._parked, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    async def _run(self) -> None:
        while True:
            if not self._due:
                self._parked = trio.lowlevel.current_task()
                # Cancelled when the run ends (system tasks are): then it just stops.
                await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.SUCCEEDED)
            # Whoever scheduled has yielded by now: this task runs only when the scheduler
            # runs it, on the same thread.
            self._send_due()

    def _send_due(self) -> None:
        # Apart from ``_run`` so that no producer stays referenced from its frame while it is
        # parked (a closed producer must be freed: tests/integration/pulsar/test_producer.py).
        due, self._due = self._due, []
        for producer in due:
            try:
                producer._send_group()
            except Exception:  # an exception here would crash the trio run
                log.exception("sending a producer's group failed")


_FLUSHER: trio.lowlevel.RunVar[GroupFlusher] = trio.lowlevel.RunVar("producer_group_flusher")


def group_flusher() -> GroupFlusher:
    """The flusher of the current trio run (started on first use)."""
    try:
        return _FLUSHER.get()
    except LookupError:
        flusher = GroupFlusher()
        _FLUSHER.set(flusher)
        return flusher
