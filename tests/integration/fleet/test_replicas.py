"""Several real gateway processes (separate replicas, each on its own port) on one Pulsar
and one ZooKeeper, with pika clients on different replicas."""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pika.exceptions
import pytest
import trio

from tests.support.clients import connect, get_bodies
from tests.support.fleet import Fleet
from tests.support.fleet_clients import (
    Consumer,
    observe_window,
    tally,
    wait_known,
    wait_until,
)
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration


def test_declare_bind_publish_consume_on_different_replicas(fleet: Fleet) -> None:
    r1, r2, r3 = fleet.replicas(3)

    declarer = connect(r1.port).channel()
    declarer.exchange_declare("orders", "direct", durable=True)
    declarer.queue_declare("work", durable=True)
    on_2, on_3 = connect(r2.port), connect(r3.port)
    # The declares reach replicas 2 and 3 through ZooKeeper within milliseconds, not at once.
    for connection in (on_2, on_3):
        wait_known(connection, "work")
        wait_known(connection, exchange="orders")
    on_2.channel().queue_bind("work", "orders", "new")

    consumers = [Consumer(f"consumer-{r.name}", r.port, "work", prefetch=10) for r in (r1, r2, r3)]
    try:
        for consumer in consumers:
            consumer.start()
        for consumer in consumers:
            consumer.wait_consuming()
        publisher = on_3.channel()
        publisher.confirm_delivery()
        sent = [f"m-{i}".encode() for i in range(300)]
        # The key's first message creates the binding's subscription (lazy subscriptions,
        # docs/fleet.md); every replica learns of the key through ZooKeeper and attaches its
        # consumer a moment later. Published before, all the work could go to the consumers
        # already there.
        publisher.basic_publish("orders", "new", sent[0])
        fleet.wait_consumers(("orders", "new"), "work", len(consumers))

        for body in sent[1:]:
            # Not mandatory: whether replica 3 already knows replica 2's binding only decides
            # a return; the message goes to the binding's topic, where replica 2 subscribed
            # the queue before bind-ok, either way.
            publisher.basic_publish("orders", "new", body)

        wait_until(
            lambda: sum(tally(consumers).values()) >= len(sent),
            timeout=60,
            what=lambda: f"{sum(tally(consumers).values())} of {len(sent)} delivered",
        )
        # A message delivered twice would show up now: look for a moment before counting.
        observe_window(1.0)
        for consumer in consumers:
            assert consumer.error is None, f"{consumer.name}: {consumer.error!r}"
    finally:
        for consumer in consumers:
            consumer.stop()
    counts = tally(consumers)
    assert sorted(counts) == sorted(sent), "lost or unexpected messages"
    assert [body for body, n in counts.items() if n > 1] == [], "delivered more than once"
    assert sum(counts.values()) == len(sent)
    shares = {consumer.name: len(consumer.received()) for consumer in consumers}
    print(f"distribution over replicas: {shares}")
    assert all(share > 0 for share in shares.values()), f"work not shared: {shares}"


def _declare_together(channels: list[Any], name: str, durable: list[bool]) -> list[str]:
    """Queue.Declare ``name`` on each channel at the same moment: "ok", or the reply code and
    text of the Channel.Close."""
    barrier = threading.Barrier(len(channels))
    outcomes = [""] * len(channels)

    def declare(index: int) -> None:
        barrier.wait(10)
        try:
            channels[index].queue_declare(name, durable=durable[index])
            outcomes[index] = "ok"
        except pika.exceptions.ChannelClosedByBroker as closed:
            outcomes[index] = f"{closed.reply_code} {closed.reply_text}"

    threads = [threading.Thread(target=declare, args=(i,)) for i in range(len(channels))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive(), "a declare never came back"
    return outcomes


def test_concurrent_conflicting_declares_on_two_replicas(fleet: Fleet, pulsar_stack: Any) -> None:
    r1, r2 = fleet.replicas(2)
    connections = [connect(r1.port), connect(r2.port)]  # each used by one thread at a time
    try:
        for round_ in range(8):
            name = f"contested-{round_}"
            channels = [connection.channel() for connection in connections]
            durable = [True, False] if round_ % 2 == 0 else [False, True]  # alternate askers
            outcomes = _declare_together(channels, name, durable)
            assert sorted(outcomes).count("ok") == 1, outcomes
            [refused] = [outcome for outcome in outcomes if outcome != "ok"]
            assert refused.startswith("406 PRECONDITION_FAILED - inequivalent arg 'durable'"), (
                refused
            )
    finally:
        for connection in connections:
            if connection.is_open:
                connection.close()


def test_equivalent_declares_on_two_replicas_at_once_both_succeed(fleet: Fleet) -> None:
    # Both replicas create the queue's default-exchange subscription at the same moment, and
    # Pulsar answers the second creation "Subscription Busy" (412) while the first completes.
    r1, r2 = fleet.replicas(2)
    connections = [connect(r1.port), connect(r2.port)]
    try:
        for round_ in range(4):
            channels = [connection.channel() for connection in connections]
            outcomes = _declare_together(channels, f"agreed-{round_}", [True, True])
            assert outcomes == ["ok", "ok"], outcomes
    finally:
        for connection in connections:
            if connection.is_open:
                connection.close()


def _confirming_publisher(port: int, queue: str) -> Any:
    """A channel in confirm mode on the replica at ``port``, once it knows ``queue``."""
    connection = connect(port)
    wait_known(connection, queue)
    channel = connection.channel()
    channel.confirm_delivery()
    return channel


def _wait_recorded(fleet: Fleet, deliveries: int) -> None:
    """Until the replicas' delivery records in ZooKeeper hold ``deliveries`` in all."""
    wait_until(
        lambda: sum(fleet.recorded_deliveries().values()) == deliveries,
        timeout=30,
        what=lambda: f"records: {fleet.recorded_deliveries()}",
    )


def _kill_a_replica_holding_unacked_messages(
    fleet: Fleet, signum: int = signal.SIGKILL
) -> Consumer:
    """Replica 1's consumer holds ten messages unacknowledged when replica 1 is killed with
    SIGKILL (or stopped with ``signum``); returns replica 2's consumer once it has received
    all ten."""
    r1, r2 = fleet.replicas(2)
    connect(r1.port).channel().queue_declare("jobs", durable=True)

    holder = Consumer("holder", r1.port, "jobs", prefetch=10, ack=False)
    survivor = Consumer("survivor", r2.port, "jobs", prefetch=100)
    try:
        holder.start()
        holder.wait_consuming()
        publisher = _confirming_publisher(r2.port, "jobs")
        sent = [f"job-{i}".encode() for i in range(10)]
        for body in sent:
            publisher.basic_publish("", "jobs", body, mandatory=True)
        wait_until(
            lambda: len(holder.received()) == len(sent),
            timeout=30,
            what=lambda: f"holder got {len(holder.received())} of {len(sent)}",
        )
        if signum == signal.SIGKILL:
            # A killed replica's deliveries are known to the others once its record in
            # ZooKeeper holds them: within two record intervals of the delivery
            # (docs/reliability.md, section 4); a replica that stops writes it as it stops.
            _wait_recorded(fleet, len(sent))
        survivor.start()
        survivor.wait_consuming()
        assert survivor.received() == []  # all ten are held, unacknowledged, by replica 1

        r1.signal(signum)
        assert r1.wait_exit() == (-signal.SIGKILL if signum == signal.SIGKILL else 0)

        wait_until(
            lambda: sorted(survivor.received()) == sorted(sent),
            timeout=60,
            what=lambda: f"survivor got {sorted(survivor.received())}",
        )
        assert survivor.error is None, repr(survivor.error)
    finally:
        holder.stop()
        survivor.stop()
    assert holder.redelivered == [False] * len(sent)
    return survivor


def test_unacked_messages_of_a_killed_replica_go_to_a_consumer_on_another(
    fleet: Fleet,
) -> None:
    survivor = _kill_a_replica_holding_unacked_messages(fleet)
    assert len(survivor.received()) == 10  # each once


def test_messages_of_a_killed_replica_come_back_flagged_redelivered(fleet: Fleet) -> None:
    # RabbitMQ sets redelivered on messages requeued when their consumer's connection died;
    # the killed replica's record in ZooKeeper tells the survivor (delivery_records.py).
    survivor = _kill_a_replica_holding_unacked_messages(fleet)
    assert all(survivor.redelivered), survivor.redelivered


def test_messages_of_a_stopped_replica_come_back_flagged_redelivered(fleet: Fleet) -> None:
    # SIGTERM: the replica closes its clients' connections (320), gives their messages back
    # and writes its record before its Pulsar consumers close.
    survivor = _kill_a_replica_holding_unacked_messages(fleet, signal.SIGTERM)
    assert len(survivor.received()) == 10
    assert all(survivor.redelivered), survivor.redelivered


def test_only_messages_delivered_before_are_flagged_redelivered_across_replicas(
    fleet: Fleet,
) -> None:
    """Replica 1's client holds five messages unacknowledged (so replica 1's record lists
    them) while replica 2's consumer takes and acks the rest; then replica 1's client goes.
    Replica 2 marks exactly those five redelivered: not the others, nor the messages replica
    1 had read ahead from Pulsar without delivering them."""
    r1, r2 = fleet.replicas(2)
    connect(r1.port).channel().queue_declare("work", durable=True)
    holder = Consumer("holder", r1.port, "work", prefetch=5, ack=False)
    worker = Consumer("worker", r2.port, "work", prefetch=5)
    try:
        for consumer in (holder, worker):
            consumer.start()
            consumer.wait_consuming()
        publisher = _confirming_publisher(r2.port, "work")
        sent = [f"m-{i}".encode() for i in range(80)]
        for body in sent[:40]:
            publisher.basic_publish("", "work", body, mandatory=True)
        wait_until(
            lambda: len(holder.received()) == 5,
            timeout=60,
            what=lambda: f"the holder got {len(holder.received())} of 5",
        )
        _wait_recorded(fleet, 5)
        for body in sent[40:]:
            publisher.basic_publish("", "work", body, mandatory=True)
        holder.stop()
        wait_until(
            lambda: set(worker.received()) == set(sent),
            timeout=60,
            what=lambda: f"the worker got {len(set(worker.received()))} of {len(sent)}",
        )
        observe_window(1.0)  # a message delivered twice would show now
        assert worker.error is None, repr(worker.error)
    finally:
        holder.stop()
        worker.stop()
    held = set(holder.received())
    assert len(held) == 5 and holder.redelivered == [False] * 5
    flags = dict(zip(worker.received(), worker.redelivered, strict=True))
    assert len(worker.received()) == len(sent), "delivered more than once"
    assert {body for body, flag in flags.items() if flag} == held


def test_a_late_replica_loads_every_vhost_before_it_listens(fleet: Fleet) -> None:
    (early,) = fleet.replicas(1)
    channel = connect(early.port).channel()
    for index in range(40):
        channel.queue_declare(f"q-{index}", durable=True)
        channel.queue_bind(f"q-{index}", "amq.direct", f"key-{index}")

    late = fleet.start("late").wait_ready()
    lines = late.output()

    def first(pattern: str) -> int:
        return next(i for i, line in enumerate(lines) if re.search(pattern, line))

    loaded = first(rf"loaded namespace public/{fleet.namespace} from ZooKeeper")
    ready = first(r"ready: loaded \d+ vhosts \(\d+ exchanges, \d+ queues, \d+ bindings\) in")
    listening = first(r"gateway\.server: listening on")
    assert loaded < ready < listening
    counts = re.search(r"(\d+) exchanges, (\d+) queues, (\d+) bindings", lines[loaded])
    assert counts is not None
    assert counts.groups() == ("6", "40", "40"), lines[loaded]
    print(lines[ready])

    # Its first client is answered from the complete view.
    client = connect(late.port).channel()
    client.confirm_delivery()
    for index in range(40):
        client.queue_declare(f"q-{index}", passive=True)
    client.basic_publish("amq.direct", "key-7", b"to q-7", mandatory=True)
    assert get_bodies(channel, "q-7", 1, timeout=30) == [b"to q-7"]


# ====================================================================== ZooKeeper lost


class ProxyThread:
    """A TcpProxy to ZooKeeper on a trio loop of its own, steered from the test's thread."""

    def __init__(self, zookeeper: str) -> None:
        host, _, port = zookeeper.rpartition(":")
        self.proxy = TcpProxy(host, int(port))
        self._token: trio.lowlevel.TrioToken | None = None
        self._started = threading.Event()
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            await nursery.start(self.proxy.run)
            self._started.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def __enter__(self) -> ProxyThread:
        self._thread.start()
        assert self._started.wait(10), "the proxy did not start"
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(10)

    def call(self, fn: Callable[[], None]) -> None:
        trio.from_thread.run_sync(fn, trio_token=self._token)


@pytest.fixture
def zookeeper_proxy(pulsar_stack: Any) -> Iterator[ProxyThread]:
    with ProxyThread(pulsar_stack.zookeeper) as proxy:
        yield proxy


def _declare_fails_with(port: int, name: str) -> int | None:
    """Declare ``name`` on a connection of its own: None if it worked, else the reply code."""
    connection = connect(port)
    try:
        connection.channel().queue_declare(name, durable=True)
        return None
    except (
        pika.exceptions.ChannelClosedByBroker,
        pika.exceptions.ConnectionClosedByBroker,
    ) as closed:
        return int(closed.reply_code)
    finally:
        if connection.is_open:
            connection.close()


def test_traffic_goes_on_while_a_replica_has_lost_zookeeper(
    fleet: Fleet, zookeeper_proxy: ProxyThread
) -> None:
    cut_off = fleet.start("cut-off", zookeeper=zookeeper_proxy.proxy.address).wait_ready()
    (steady,) = fleet.replicas(1)
    connect(cut_off.port).channel().queue_declare("steady", durable=True)
    wait_known(connect(steady.port), "steady")

    consumer = Consumer("consumer", steady.port, "steady", prefetch=50)
    try:
        consumer.start()
        consumer.wait_consuming()
        publisher = connect(cut_off.port).channel()
        publisher.confirm_delivery()
        before = [f"before-{i}".encode() for i in range(50)]
        for body in before:
            publisher.basic_publish("", "steady", body, mandatory=True)

        zookeeper_proxy.call(zookeeper_proxy.proxy.cut)
        cut_off.wait_for(r"ZooKeeper connection suspended", timeout=30)
        # Publishing and consuming go on with the entities already known.
        during = [f"during-{i}".encode() for i in range(50)]
        for body in during:
            publisher.basic_publish("", "steady", body, mandatory=True)
        # Changes are refused on the replica without ZooKeeper (541, "try again") ...
        assert _declare_fails_with(cut_off.port, "refused-while-cut") == 541
        # ... and accepted on the others, which the cut-off one learns once it is back.
        assert _declare_fails_with(steady.port, "made-while-cut") is None

        zookeeper_proxy.call(zookeeper_proxy.proxy.restore)
        wait_until(
            lambda: _declare_fails_with(cut_off.port, "after-restore") is None,
            timeout=60,
            what="a declare on the replica that lost ZooKeeper",
        )
        # Learnt from the listing after the reconnection.
        wait_known(connect(cut_off.port), "made-while-cut")

        wait_until(
            lambda: sorted(consumer.received()) == sorted(before + during),
            timeout=60,
            what=lambda: f"{len(consumer.received())} of {len(before + during)} delivered",
        )
        assert consumer.error is None, repr(consumer.error)
    finally:
        consumer.stop()


def test_what_one_replica_declares_is_usable_at_once_on_another(fleet: Fleet) -> None:
    # No wait for the watch: a replica that misses a name asks ZooKeeper before it says 404.
    r1, r2 = fleet.replicas(2)
    on_1, on_2 = connect(r1.port).channel(), connect(r2.port)
    for round_ in range(10):
        queue, exchange = f"fresh-{round_}", f"fresh-x-{round_}"
        on_1.exchange_declare(exchange, "direct")
        on_1.queue_declare(queue)
        channel = on_2.channel()
        channel.confirm_delivery()
        assert channel.queue_declare(queue, passive=True).method.consumer_count == 0
        channel.exchange_declare(exchange, passive=True)
        channel.queue_bind(queue, exchange, "k")
        channel.basic_publish(exchange, "k", f"m-{round_}".encode(), mandatory=True)
        assert get_bodies(channel, queue, 1, timeout=30) == [f"m-{round_}".encode()]
        channel.basic_consume(queue, print)
        channel.close()
