"""queue_types/stream/feed.py: the streams of a view, found by looking only at the chunks of the
queue map that changed since the last look."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.fieldtable import Field
from gateway.backend.pulsar.leader.scope import LeaderScope
from gateway.backend.pulsar.queue_types.stream.feed import StreamFeeder
from gateway.metadata.chunked import ChunkedDict
from gateway.model.entities import Queue

_STREAM = {"x-queue-type": Field("S", "stream")}

_OPS = st.lists(
    st.tuples(st.sampled_from(["stream", "classic", "del", "look"]), st.integers(0, 4000)),
    max_size=150,
)


def _feeder() -> StreamFeeder:
    return StreamFeeder(LeaderScope(cast(Any, None), cast(Any, None), cast(Any, None), "public/ns"))


def _view(queues: object) -> Any:
    return SimpleNamespace(queues=queues)


@given(_OPS)
def test_the_streams_found_step_by_step_are_those_of_a_full_look(
    ops: list[tuple[str, int]],
) -> None:
    live: ChunkedDict[str, Queue] = ChunkedDict()
    feeder = _feeder()
    for op, number in [*ops, ("look", 0)]:
        name = f"q{number}"
        if op == "stream":
            live[name] = Queue(name, durable=True, arguments=_STREAM)
        elif op == "classic":
            live[name] = Queue(name)
        elif op == "del":
            live.pop(name, None)
        else:
            queues = live.frozen()
            found = feeder.streams(_view(queues))
            expected = {n for n, q in queues.items() if q.arguments == _STREAM}
            assert sorted(found) == sorted(expected) and len(found) == len(expected)
            assert feeder.streams(_view(queues)) is found  # the same snapshot: not looked at


def test_a_plain_mapping_is_looked_at_whole() -> None:
    feeder = _feeder()
    queues = {"s": Queue("s", durable=True, arguments=_STREAM), "c": Queue("c")}
    assert feeder.streams(_view(queues)) == ("s",)
    chunked: ChunkedDict[str, Queue] = ChunkedDict()
    chunked["t"] = Queue("t", durable=True, arguments=_STREAM)
    assert feeder.streams(_view(chunked.frozen())) == ("t",)  # from a plain map: all of it
