"""The group flusher sends a scheduled group once the scheduling task yields, never before."""

from __future__ import annotations

import trio

from gateway.pulsar.group_flusher import group_flusher


class Recorder:
    def __init__(self, log: list[str], name: str, *, fail: bool = False) -> None:
        self.log = log
        self.name = name
        self.fail = fail

    def _send_group(self) -> None:
        self.log.append(f"sent {self.name}")
        if self.fail:
            raise RuntimeError("boom")


def test_a_group_goes_once_the_scheduling_task_yields() -> None:
    log: list[str] = []

    async def main() -> None:
        flusher = group_flusher()
        first, second = Recorder(log, "a"), Recorder(log, "b")
        flusher.schedule(first)
        log.append("still submitting")
        flusher.schedule(second)
        log.append("yield")
        await trio.testing.wait_all_tasks_blocked()
        assert log == ["still submitting", "yield", "sent a", "sent b"]
        # Parked again, it wakes for the next one.
        flusher.schedule(first)
        await trio.testing.wait_all_tasks_blocked()
        assert log[-1] == "sent a"

    trio.run(main)


def test_one_flusher_per_run_and_a_failing_send_does_not_stop_it() -> None:
    log: list[str] = []
    flushers = []

    async def main() -> None:
        flusher = group_flusher()
        assert group_flusher() is flusher
        flushers.append(flusher)
        flusher.schedule(Recorder(log, "bad", fail=True))
        flusher.schedule(Recorder(log, "good"))
        await trio.testing.wait_all_tasks_blocked()
        flusher.schedule(Recorder(log, "later"))
        await trio.testing.wait_all_tasks_blocked()

    trio.run(main)
    trio.run(main)
    assert flushers[0] is not flushers[1]
    assert log == ["sent bad", "sent good", "sent later"] * 2
