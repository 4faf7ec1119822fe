"""A consumer started while a Basic.Get delivery is held unacknowledged gets every other
message of the queue (the gateway's Basic.Get consumer, retired by the Basic.Consume, must
not keep one it read ahead). Found by the Java client's settle_on_close scenario
("prefetch0-connection-cancel-get") when TrioConsumer briefly asked pulsar-client for
messages instead of using a listener (docs/benchmarks.md, "A listener, not asking")."""

import time

from pika.adapters.blocking_connection import BlockingChannel


def test_consume_after_a_held_get_gets_the_rest(channel: BlockingChannel) -> None:
    channel.queue_declare("q")
    for i in range(5):
        channel.basic_publish("", "q", b"m%d" % i)
    deadline = time.monotonic() + 10
    method = None
    while method is None and time.monotonic() < deadline:  # the publishes may be on their way
        method, _, held = channel.basic_get("q", auto_ack=False)
    assert method is not None
    got: list[bytes] = []
    channel.basic_qos(prefetch_count=0)
    channel.basic_consume("q", lambda _ch, _m, _p, body: got.append(body))
    deadline = time.monotonic() + 15
    while len(got) < 4 and time.monotonic() < deadline:
        channel.connection.process_data_events(0.2)
    assert sorted([held, *got]) == [b"m%d" % i for i in range(5)]
