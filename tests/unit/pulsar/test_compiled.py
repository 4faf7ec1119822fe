"""The compiled module (gateway/pulsar/native/) without a broker: what Python asks of
it. What it does with messages is in tests/integration/pulsar/test_consumer.py, run with both
listeners."""

from __future__ import annotations

import os
import select
import shutil
import threading
from types import ModuleType

import pytest
import trio

from gateway.pulsar import compiled, doorbell


@pytest.fixture
def module() -> ModuleType:
    loaded = compiled.load()
    if loaded is None:
        if shutil.which("gcc") is None:
            pytest.skip("no gcc: the compiled listener cannot be built here")
        pytest.fail("the compiled listener is not built (make install builds it)")
    return loaded


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

    listener = module.Listener(4, module.Doorbell(), 1)
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
    listener = module.Listener(4, module.Doorbell(), 1)
    assert listener.left(1) is False  # never full: nothing to resume
    assert listener.left(-3) is False  # messages put back count again


def test_a_closed_listener_refuses_new_work(module: ModuleType) -> None:
    import _pulsar

    listener = module.Listener(4, module.Doorbell(), 1)
    listener.close()
    listener.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        listener.configure(_pulsar.ConsumerConfiguration())
    with pytest.raises(RuntimeError, match="closed"):
        listener.drain()
    assert listener.left(1) is False


def test_capacity_must_be_positive(module: ModuleType) -> None:
    with pytest.raises(ValueError, match="capacity"):
        module.Listener(0, module.Doorbell(), 1)


# --------------------------------------------------------------------------------- doorbell


def _rung(bell: object) -> bool:
    """Whether the doorbell's eventfd is readable now."""
    readable, _, _ = select.select([bell.fileno()], [], [], 0)  # type: ignore[attr-defined]
    return bool(readable)


def test_a_receipt_rings_once_until_it_is_drained(module: ModuleType) -> None:
    bell = module.Doorbell()
    sender = module.Sender(bell, 7)
    assert not _rung(bell) and bell.take() == []
    sender.receipt(1)
    sender.receipt(2)  # queued, no second ring: the first is not drained yet
    assert _rung(bell)
    assert bell.take() == [7]
    assert not _rung(bell)
    sender.receipt(3)
    assert not _rung(bell), "rings again only once drain() re-armed it"
    assert sender.drain() == [(1, -1), (2, -1), (3, -1)]
    sender.receipt(4)
    assert bell.take() == [7]


def test_numbers_come_in_the_order_they_rang(module: ModuleType) -> None:
    bell = module.Doorbell()
    senders = [module.Sender(bell, number) for number in (5, 3, 9)]
    for sender in reversed(senders):
        sender.receipt(1)
    assert bell.take() == [9, 3, 5]


def test_a_sender_outlives_its_doorbell_object(module: ModuleType) -> None:
    bell = module.Doorbell()
    fd = bell.fileno()
    sender = module.Sender(bell, 1)
    del bell
    sender.receipt(1)  # rings the doorbell's memory, which the sender still holds
    assert os.fstat(fd)
    del sender
    with pytest.raises(OSError):
        os.fstat(fd)  # the last holder closed the eventfd


def test_only_a_doorbell_is_taken(module: ModuleType) -> None:
    with pytest.raises(TypeError, match="Doorbell"):
        module.Sender(object(), 1)
    with pytest.raises(TypeError, match="Doorbell"):
        module.Listener(4, lambda: None, 1)


def test_a_ring_from_another_thread_reaches_trio(module: ModuleType) -> None:
    async def main() -> list[str]:
        called: list[str] = []
        done = trio.Event()
        bell = doorbell.of_this_run(module)
        assert doorbell.of_this_run(module) is bell  # one per run
        sender = module.Sender(bell.native, bell.register(lambda: called.append("a")))
        other = module.Sender(bell.native, bell.register(done.set))
        number = bell.register(lambda: called.append("closed"))
        closed = module.Sender(bell.native, number)
        bell.unregister(number)
        thread = threading.Thread(target=lambda: [s.receipt(1) for s in (closed, sender, other)])
        thread.start()
        with trio.fail_after(10):
            await done.wait()
        thread.join()
        return called

    assert trio.run(main) == ["a"]
