"""The compiled module (gateway/pulsar/native/) without a broker: what Python asks of
it. What it does with messages is in tests/integration/pulsar/test_consumer.py, run with both
listeners."""

from __future__ import annotations

from types import ModuleType

import pytest

from gateway.pulsar import compiled
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
