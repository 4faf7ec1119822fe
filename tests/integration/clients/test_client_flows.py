"""Whole application flows with real client libraries, on both backends: pika's callback
adapter (SelectConnection) for a work queue and for RPC, and kombu the way Celery uses it
(a durable direct exchange and queue, JSON serializer, acks, requeue, a fanout broadcast)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import kombu
import pika
import pytest
from kombu.message import Message as KombuMessage

from tests.integration.clients.conftest import PULSAR_BATCH_INDEX, PULSAR_ONLY, Running
from tests.support.clients import SelectFlow, amqp_url, drain_kombu, unique, wait_for_count

# ------------------------------------------------------------------------- pika SelectConnection


def test_select_connection_work_queue(running: Running) -> None:
    """Declare a durable queue, publish persistent messages with confirms, consume them with
    a prefetch window and manual acks, all from callbacks."""
    queue = unique("work")
    total = 60
    flow = SelectFlow(running.port)
    confirmed: list[int] = []
    received: list[tuple[bytes, Any]] = []
    properties = pika.BasicProperties(
        content_type="application/json", delivery_mode=2, headers={"attempt": 1, "who": "select"}
    )

    def start(channel: Any) -> None:
        def on_confirm(frame: Any) -> None:
            confirmed.append(frame.method.delivery_tag)

        def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
            received.append((body, props))
            ch.basic_ack(method.delivery_tag)
            if len(received) == total:
                flow.finish()

        def consume(_frame: Any) -> None:
            channel.basic_consume(queue, on_message)

        def publish(_frame: Any) -> None:
            for n in range(total):
                channel.basic_publish("", queue, f'{{"n": {n}}}'.encode(), properties)
            channel.basic_qos(prefetch_count=10, callback=consume)

        def select(_frame: Any) -> None:
            channel.confirm_delivery(on_confirm, callback=publish)

        channel.queue_declare(queue, durable=True, callback=select)

    flow.run(start)
    assert [body for body, _ in received] == [f'{{"n": {n}}}'.encode() for n in range(total)]
    for _, props in received:
        assert props.content_type == "application/json"
        assert props.delivery_mode == 2
        assert props.headers == {"attempt": 1, "who": "select"}
    assert confirmed and max(confirmed) == total
    connection = running.connect()
    assert wait_for_count(connection.channel(), queue, 0) == 0
    connection.channel().queue_delete(queue)
    connection.close()


def test_select_connection_rpc(running: Running) -> None:
    """RPC over a server-named exclusive reply queue: requests carry reply_to and
    correlation_id, a responder on another channel answers each."""
    rpc_queue = unique("rpc")
    flow = SelectFlow(running.port)
    replies: dict[str, bytes] = {}
    requests = {str(uuid.uuid4()): n for n in range(8)}

    def start(client: Any) -> None:
        def responder_ready(server: Any) -> None:
            def serve(ch: Any, method: Any, props: Any, body: bytes) -> None:
                answer = str(int(body) ** 2).encode()
                ch.basic_publish(
                    "",
                    props.reply_to,
                    answer,
                    pika.BasicProperties(correlation_id=props.correlation_id),
                )
                ch.basic_ack(method.delivery_tag)

            def serving(_frame: Any) -> None:
                server.basic_consume(rpc_queue, serve)
                client.queue_declare("", exclusive=True, callback=reply_queue_ready)

            server.queue_declare(rpc_queue, callback=serving)

        def reply_queue_ready(frame: Any) -> None:
            reply_to = frame.method.queue
            assert reply_to.startswith("amq.gen-")

            def on_reply(_ch: Any, _method: Any, props: Any, body: bytes) -> None:
                replies[props.correlation_id] = body
                if len(replies) == len(requests):
                    flow.finish()

            def send(_frame: Any) -> None:
                for correlation_id, n in requests.items():
                    client.basic_publish(
                        "",
                        rpc_queue,
                        str(n).encode(),
                        pika.BasicProperties(reply_to=reply_to, correlation_id=correlation_id),
                    )

            client.basic_consume(reply_to, on_reply, auto_ack=True, callback=send)

        flow.connection.channel(on_open_callback=responder_ready)

    flow.run(start)
    assert replies == {cid: str(n * n).encode() for cid, n in requests.items()}
    connection = running.connect()
    connection.channel().queue_delete(rpc_queue)
    connection.close()


# ---------------------------------------------------------------------------------- kombu


def test_kombu_celery_like_task_flow(running: Running) -> None:
    exchange = kombu.Exchange(unique("tasks"), type="direct", durable=True)
    queue = kombu.Queue(unique("celery"), exchange, routing_key="celery", durable=True)
    tasks = [
        {"task": "proj.add", "id": str(uuid.uuid4()), "args": [n, n + 1], "kwargs": {}}
        for n in range(10)
    ]
    with kombu.Connection(amqp_url(running.port)) as connection:
        producer = kombu.Producer(connection.channel(), exchange=exchange, serializer="json")
        for task in tasks:
            producer.publish(
                task,
                routing_key="celery",
                declare=[queue],
                headers={"task": task["task"], "id": task["id"], "retries": 0},
                correlation_id=task["id"],
                delivery_mode=2,
            )
        seen: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = []

        def on_task(body: dict[str, Any], message: KombuMessage) -> None:
            seen.append((body, dict(message.headers), dict(message.delivery_info)))
            message.ack()

        with kombu.Consumer(
            connection.channel(), queues=[queue], callbacks=[on_task], accept=["json"]
        ):
            drain_kombu(connection, lambda: len(seen) == len(tasks))
        assert [body for body, _, _ in seen] == tasks
        for (body, headers, info), task in zip(seen, tasks, strict=True):
            assert headers == {"task": task["task"], "id": task["id"], "retries": 0}
            assert info["routing_key"] == "celery"
            assert info["exchange"] == exchange.name
            assert info["redelivered"] is False
            assert body["id"] == task["id"]
        # Everything acked: the queue is empty.
        channel = connection.channel()
        _, count, _ = channel.queue_declare(queue.name, passive=True)
        deadline = time.monotonic() + 10
        while count and time.monotonic() < deadline:
            _, count, _ = channel.queue_declare(queue.name, passive=True)
        assert count == 0
        queue(channel).delete()
        exchange(channel).delete()


# Also on a broker that keeps batch-index acknowledgements, where the gateway's producers batch:
# a requeued message of a batch is written again to its queue's own topic, which, with lazy
# subscriptions, had no subscription for a queue only ever bound to a topic exchange (the copy
# was lost until that write prepared the topic as a publisher does).
@pytest.mark.parametrize("running", ["memory", PULSAR_ONLY, PULSAR_BATCH_INDEX], indirect=True)
def test_kombu_requeue_and_reject(running: Running) -> None:
    queue = kombu.Queue(unique("retry"), kombu.Exchange(unique("x"), type="topic"), "jobs.#")
    with kombu.Connection(amqp_url(running.port)) as connection:
        producer = kombu.Producer(connection.channel(), serializer="json")
        producer.publish({"job": 1}, exchange=queue.exchange, routing_key="jobs.a", declare=[queue])
        producer.publish({"job": 2}, exchange=queue.exchange, routing_key="jobs.b")
        events: list[tuple[int, bool]] = []

        def on_job(body: dict[str, Any], message: KombuMessage) -> None:
            redelivered = bool(message.delivery_info["redelivered"])
            events.append((body["job"], redelivered))
            if body["job"] == 1 and not redelivered:
                message.requeue()  # try again
            elif body["job"] == 2:
                message.reject()  # dropped
            else:
                message.ack()

        with kombu.Consumer(
            connection.channel(), queues=[queue], callbacks=[on_job], accept=["json"]
        ):
            drain_kombu(connection, lambda: len(events) >= 3)
        # Two routing keys, two topics: order across them is not promised.
        assert sorted(events) == [(1, False), (1, True), (2, False)]
        assert events.index((1, False)) < events.index((1, True))
        simple = connection.SimpleQueue(queue)
        with pytest.raises(simple.Empty):
            simple.get(block=True, timeout=0.5)
        simple.close()


def test_kombu_fanout_broadcast(running: Running) -> None:
    """Celery's broadcast/pidbox shape: a fanout exchange, one auto-delete queue per worker."""
    exchange = kombu.Exchange(unique("pidbox"), type="fanout", durable=False, auto_delete=True)
    workers = [kombu.Queue(unique("worker"), exchange, auto_delete=True) for _ in range(3)]
    with kombu.Connection(amqp_url(running.port)) as connection:
        got: dict[str, list[dict[str, Any]]] = {q.name: [] for q in workers}
        consumers = []
        for worker in workers:

            def on_command(
                body: dict[str, Any], message: KombuMessage, name: str = worker.name
            ) -> None:
                got[name].append(body)
                message.ack()

            consumer = kombu.Consumer(
                connection.channel(), queues=[worker], callbacks=[on_command], accept=["json"]
            )
            consumer.consume()
            consumers.append(consumer)
        producer = kombu.Producer(connection.channel(), exchange=exchange, serializer="json")
        producer.publish({"method": "ping"}, routing_key="")
        producer.publish({"method": "shutdown"}, routing_key="ignored")
        drain_kombu(connection, lambda: all(len(bodies) == 2 for bodies in got.values()))
        for bodies in got.values():
            assert bodies == [{"method": "ping"}, {"method": "shutdown"}]
        for consumer in consumers:
            consumer.cancel()
