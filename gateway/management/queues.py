"""``/api/queues``: list, show, declare, delete, purge and get, with RabbitMQ's JSON.

Entities come from the replica's view of the metadata (a name it does not know yet is looked
up in ZooKeeper before a 404, as on AMQP); counts and rates from Pulsar, now
(backend/pulsar/queue_info.py), for the queues a response shows. Writes go through the same
backend calls as AMQP's Queue.Declare/Delete/Purge and Basic.Get, so every rule (arguments,
equivalence, permissions) answers the same, in RabbitMQ's HTTP form (errors.py).
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import trio

from gateway.amqp import commands as cmd
from gateway.amqp.properties import decode_properties
from gateway.backend.interface import Delivery
from gateway.backend.pulsar.queue_info import QueueCounter, QueueCounts
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.management.connections import held_at_most, queue_consumers
from gateway.management.context import Call, amqp, check_name
from gateway.management.errors import Response, bad_request, json_response, not_found
from gateway.management.fields import arguments, boolean, integer, string
from gateway.management.listing import arrange, select_columns
from gateway.model.arguments import queue_type_named
from gateway.model.entities import Queue
from gateway.model.json_values import json_value, table_json

__all__ = [
    "delete_queue",
    "get_messages",
    "get_queue",
    "list_queues",
    "purge_queue",
    "put_queue",
    "queue_bindings",
]

COUNT_FIELDS = ("messages", "message_stats")
ACK_MODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")


def queue_json(call: Call, vhost: str, queue: Queue, consumers: int) -> dict[str, Any]:
    kind = queue_type_named(queue.arguments)
    return {
        "name": queue.name,
        "vhost": vhost,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive,
        "arguments": table_json(queue.arguments),
        "type": kind,
        "node": call.context.node,
        "state": "running",
        "consumers": consumers,
        "policy": None,
        "exclusive_consumer_tag": None,
        "single_active_consumer_tag": None,
    }


def with_counts(
    item: dict[str, Any], counts: QueueCounts, consumers: list[dict[str, Any]] | None = None
) -> None:
    """The counts (and what the queue's consumers, when known, say of its consumer tags)."""
    counts = _held(counts, consumers)
    for consumer in consumers or ():
        if consumer["exclusive"]:
            item["exclusive_consumer_tag"] = consumer["consumer_tag"]
        if consumer["activity_status"] == "single_active":
            item["single_active_consumer_tag"] = consumer["consumer_tag"]
    item.update(
        {
            "messages": counts.messages,
            "messages_ready": counts.ready,
            "messages_unacknowledged": counts.unacknowledged,
            "messages_details": {"rate": 0.0},
            "messages_ready_details": {"rate": 0.0},
            "messages_unacknowledged_details": {"rate": 0.0},
            "message_stats": {
                "publish": counts.published,
                "publish_details": {"rate": counts.publish_rate},
                "deliver_get_details": {"rate": counts.deliver_rate},
                "ack_details": {"rate": counts.ack_rate},
            },
        }
    )


async def list_queues(call: Call) -> Response:
    items: list[dict[str, Any]] = []
    handles: dict[str, PulsarVirtualHost] = {}
    for vhost, _namespace in await call.listed_vhosts():
        handle = handles[vhost] = await call.pulsar_vhost(vhost)
        view = handle.catalog.view
        items.extend(
            queue_json(call, vhost, queue, view.consumers.get(queue.name, 0))
            for queue in view.queues.values()
        )
    query = dict(call.query)
    columns = [c for c in query.pop("columns", "").split(",") if c]
    needs_counts = not columns or any(c.startswith(COUNT_FIELDS) for c in columns)
    if query.get("sort", "").startswith(COUNT_FIELDS):
        await _fill(call, handles, items)  # sorting needs them all
        needs_counts = False
    result = arrange(items, query, ["vhost", "name"])
    shown = result["items"] if isinstance(result, dict) else result
    if needs_counts:
        await _fill(call, handles, shown)
    if columns:
        shown[:] = [select_columns(item, columns) for item in shown]
    return json_response(200, result)


async def _fill(
    call: Call, handles: dict[str, PulsarVirtualHost], items: list[dict[str, Any]]
) -> None:
    counter = QueueCounter(call.context.admin)
    consumers = await _consumers_of(call, items)

    async def one(item: dict[str, Any]) -> None:
        handle = handles[item["vhost"]]
        counts = await amqp(counter.counts(handle, item["name"]))
        mine = consumers.get((str(handle.namespace), item["name"]))
        with_counts(item, counts, mine)

    async with trio.open_nursery() as nursery:
        for item in items:
            nursery.start_soon(one, item)


async def _consumers_of(
    call: Call, items: list[dict[str, Any]]
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The fleet's consumers by queue, read only when a queue shown has any (the records of
    every replica's connections are read: nothing to read for queues without consumers)."""
    if not any(item.get("consumers") for item in items):
        return {}
    return await queue_consumers(call)


def _held(counts: QueueCounts, consumers: list[dict[str, Any]] | None) -> QueueCounts:
    """Pulsar's count of unacknowledged messages includes what the replicas read ahead for
    their consumers and have not delivered (up to about twice a consumer's prefetch more):
    RabbitMQ counts those as ready. No more are unacknowledged than the queue's consumers
    may hold, the sum of their prefetch counts (docs/management.md, "Counts and rates")."""
    if not consumers:
        return counts
    most = held_at_most(consumers)
    if counts.unacknowledged <= most:
        return counts
    unacknowledged = int(most)
    return dataclasses.replace(
        counts, unacknowledged=unacknowledged, ready=max(0, counts.messages - unacknowledged)
    )


async def _find(call: Call, *, writing: bool = False) -> tuple[str, PulsarVirtualHost, Queue]:
    namespace, vhost, handle = await call.named_vhost(writing=writing)
    name = call.params["name"]
    queue = await call.queue_in(namespace, handle, name)
    if queue is None:
        raise not_found()
    return vhost, handle, queue


async def get_queue(call: Call) -> Response:
    vhost, handle, queue = await _find(call)
    item = queue_json(call, vhost, queue, handle.catalog.view.consumers.get(queue.name, 0))
    counter = QueueCounter(call.context.admin)
    consumers = (await _consumers_of(call, [item])).get((str(handle.namespace), queue.name), [])
    with_counts(item, await amqp(counter.counts(handle, queue.name)), consumers)
    item["consumer_details"] = consumers
    columns = [c for c in call.query.get("columns", "").split(",") if c]
    return json_response(200, select_columns(item, columns) if columns else item)


async def put_queue(call: Call) -> Response:
    namespace = await call.namespace(call.params["vhost"], writing=True)
    body = call.body()
    name = call.params["name"]
    if len(name.encode()) > 255:
        raise bad_request(f"queue name too long: {name!r}")
    if boolean(body, "exclusive", False):
        raise bad_request("exclusive queues belong to an AMQP connection; declare them on one")
    check_name(name)
    command = cmd.QueueDeclare(
        queue=name,
        durable=boolean(body, "durable", False),
        auto_delete=boolean(body, "auto_delete", False),
        arguments=arguments(body),
    )
    handle = await call.vhost_for_writes(call.vhost_name(namespace))
    status = await amqp(handle.declare_queue(command, call.owner()))
    return Response(201 if status.created else 204, content_type=None)


async def delete_queue(call: Call) -> Response:
    vhost, _, queue = await _find(call)
    command = cmd.QueueDelete(
        queue.name,
        if_unused=call.query.get("if-unused") == "true",
        if_empty=call.query.get("if-empty") == "true",
    )
    handle = await call.vhost_for_writes(vhost)
    await amqp(handle.delete_queue(command, call.owner()))
    return Response(204, content_type=None)


async def purge_queue(call: Call) -> Response:
    vhost, _, queue = await _find(call)
    handle = await call.vhost_for_writes(vhost)
    await amqp(handle.purge_queue(cmd.QueuePurge(queue.name), call.owner()))
    return Response(204, content_type=None)


async def get_messages(call: Call) -> Response:
    """``POST .../get``: up to ``count`` messages; with a requeueing ``ackmode`` they are all
    taken before any goes back (RabbitMQ's ``basic_get`` loop), so one is not read twice."""
    vhost, _, queue = await _find(call)
    body = call.body()
    count = integer(body, "count")
    ackmode = string(body, "ackmode")
    encoding = string(body, "encoding", "auto")
    truncate = body.get("truncate")
    if ackmode not in ACK_MODES:
        raise bad_request(f"ackmode must be one of {', '.join(ACK_MODES)}, not {ackmode!r}")
    if encoding not in ("auto", "base64"):
        raise bad_request(f"encoding must be auto or base64, not {encoding!r}")
    handle = await call.vhost_for_writes(vhost)
    owner = call.owner()
    taken: list[Delivery] = []
    answer: list[dict[str, Any]] = []
    try:
        for _ in range(max(0, count)):
            got = await amqp(handle.get(cmd.BasicGet(queue.name), owner))
            if got is None:
                break
            delivery, remaining = got
            taken.append(delivery)
            answer.append(_message_json(delivery, remaining, encoding, truncate))
    finally:
        with trio.CancelScope(shield=True):
            for delivery in taken:
                if ackmode == "ack_requeue_false":
                    await delivery.ack()
                else:
                    await delivery.reject(requeue=ackmode.endswith("requeue_true"))
    return json_response(200, answer)


def _message_json(
    delivery: Delivery, remaining: int, encoding: str, truncate: Any
) -> dict[str, Any]:
    message = delivery.message
    payload = message.body
    size = len(payload)
    if isinstance(truncate, int) and not isinstance(truncate, bool) and truncate >= 0:
        payload = payload[:truncate]
    text: str | None = None
    if encoding == "auto":
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    decoded = decode_properties(message.header)
    properties = {
        field.name: json_value(getattr(decoded, field.name))
        for field in dataclasses.fields(decoded)
        if getattr(decoded, field.name) is not None
    }
    return {
        "payload_bytes": size,
        "redelivered": delivery.redelivered,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "message_count": remaining,
        # An empty property list is [] in RabbitMQ's JSON (an empty Erlang proplist).
        "properties": properties or [],
        "payload": text if text is not None else base64.b64encode(payload).decode(),
        "payload_encoding": "string" if text is not None else "base64",
    }


async def queue_bindings(call: Call) -> Response:
    from gateway.management.bindings import binding_json, default_binding

    vhost, handle, queue = await _find(call)
    view = handle.catalog.view
    items = [default_binding(vhost, queue.name)]
    items.extend(binding_json(vhost, b) for b in view.queue_bindings.get(queue.name, ()))
    return json_response(200, arrange(items, call.query, []))
