"""The compiled module (gateway/pulsar/native/) without a broker: what Python asks of
it. What it does with messages is in tests/integration/pulsar/test_consumer.py, run with both
listeners."""

from __future__ import annotations

import select
from types import ModuleType

import pytest
import trio

from gateway.pulsar import compiled
from gateway.pulsar.doorbell import doorbell
from tests.support.compiled_modules import require_built


@pytest.fixture
def module() -> ModuleType:
    return require_built(compiled.load(), "the compiled module")


def test_the_module_is_keyed_by_its_source_and_python() -> None:
    path = compiled.module_path()
    assert path is not None and path.name.startswith(compiled.MODULE_NAME)
    assert path.parent.parent.name == "native"


def test_it_reads_a_configuration_through_the_c_api(module: ModuleType) -> None:
    import _pulsar

    conf = _pulsar.ConsumerConfiguration()
    conf.receiver_queue_size(77)
    assert module.receiver_queue_size(conf) == 77


def test_each_configuration_gets_its_own_tag(module: ModuleType) -> None:
    import _pulsar

    listener = module.Listener(4, lambda: None)
    assert [listener.configure(_pulsar.ConsumerConfiguration()) for _ in range(5)] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert listener.drain() == [] and listener.queued == 0 and not listener.full
    with pytest.raises(ValueError, match="no tag 5"):
        listener.detach(5)
    assert listener.detach(4) == 0


def test_left_resumes_only_after_a_pause(module: ModuleType) -> None:
    listener = module.Listener(4, lambda: None)
    assert listener.left(1) is False  # never full: nothing to resume
    assert listener.left(-3) is False  # messages put back count again


def test_a_closed_listener_refuses_new_work(module: ModuleType) -> None:
    import _pulsar

    listener = module.Listener(4, lambda: None)
    listener.close()
    listener.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        listener.configure(_pulsar.ConsumerConfiguration())
    with pytest.raises(RuntimeError, match="closed"):
        listener.drain()
    assert listener.left(1) is False


def test_capacity_must_be_positive(module: ModuleType) -> None:
    with pytest.raises(ValueError, match="capacity"):
        module.Listener(0, lambda: None)


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_a_sender_rings_its_doorbell_once_until_drained(module: ModuleType) -> None:
    bell = module.Doorbell()
    woken: list[str] = []
    sender = module.Sender(lambda: woken.append("sender"), bell)
    assert bell.take() == [] and not readable(bell.fileno())
    sender.receipt(1, 0)
    sender.receipt(2, 0)  # rang already, not drained: no second ring
    assert readable(bell.fileno())
    for on_ready in bell.take():
        on_ready()
    assert woken == ["sender"] and not readable(bell.fileno())
    sender.receipt(3, 0)
    assert bell.take() == []  # not drained yet: the bell was not rung again
    assert sender.drain() == [(1, 0), (2, 0), (3, 0)]
    sender.receipt(4, 0)
    assert len(bell.take()) == 1


def test_a_sender_freed_after_ringing_is_left_out(module: ModuleType) -> None:
    bell = module.Doorbell()
    sender = module.Sender(lambda: None, bell)
    sender.receipt(1, 0)
    del sender
    assert bell.take() == []


def test_a_ring_from_another_thread_wakes_the_trio_side(module: ModuleType) -> None:
    # What pulsar-client's I/O thread does: ring without the GIL (here, a thread's receipt).
    async def main() -> list[tuple[int, int]]:
        drained: list[tuple[int, int]] = []
        done = trio.Event()

        def on_ready() -> None:
            drained.extend(sender.drain())
            if len(drained) == 100:
                done.set()

        sender = module.Sender(on_ready, doorbell(module))

        def ring() -> None:
            for token in range(100):
                sender.receipt(token, 0)

        await trio.to_thread.run_sync(ring)
        with trio.fail_after(10):
            await done.wait()
        return drained

    assert trio.run(main) == [(token, 0) for token in range(100)]
