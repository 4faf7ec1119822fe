"""``/api/bindings``: list, bind (POST) and unbind (DELETE by ``properties_key``), queue and
exchange destinations alike.

``properties_key`` names a binding among those between the same two ends, as RabbitMQ's
``rabbit_mgmt_format:pack_binding_props``: the routing key, URL-quoted (``~`` as ``%7E``),
``~`` alone for an empty key, and ``<key>~<digest of the arguments>`` when the binding has
arguments. RabbitMQ's digest is Erlang's ``phash2`` of its argument terms; here it is the
128-bit BLAKE2b the metadata store names bindings by (docs/metadata.md), so a key read from
this API is the one to send back to it, as with RabbitMQ's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote_plus, unquote_plus

from gateway.amqp import commands as cmd
from gateway.amqp.fieldtable import Field
from gateway.management.context import Call, amqp
from gateway.management.errors import Response, json_response, not_found
from gateway.management.fields import arguments, string
from gateway.management.listing import arrange
from gateway.metadata.codec import arguments_digest
from gateway.metadata.store import VhostView
from gateway.model.entities import Binding, ExchangeBinding
from gateway.model.json_values import table_json

__all__ = [
    "binding_json",
    "default_binding",
    "delete_binding",
    "get_binding",
    "list_between",
    "list_bindings",
    "post_binding",
]


def properties_key(routing_key: str, args: Mapping[str, Field]) -> str:
    digest = arguments_digest(args) if args else None
    if not routing_key and digest is None:
        return "~"
    key = quote_plus(routing_key).replace("~", "%7E")
    return key if digest is None else f"{key}~{digest}"


def binding_json(vhost: str, binding: Binding | ExchangeBinding) -> dict[str, Any]:
    if isinstance(binding, Binding):
        source, destination, kind = binding.exchange, binding.queue, "queue"
    else:
        source, destination, kind = binding.source, binding.destination, "exchange"
    return {
        "source": source,
        "vhost": vhost,
        "destination": destination,
        "destination_type": kind,
        "routing_key": binding.routing_key,
        "arguments": table_json(binding.arguments),
        "properties_key": properties_key(binding.routing_key, binding.arguments),
    }


def default_binding(vhost: str, queue: str) -> dict[str, Any]:
    """The default exchange's implicit binding of every queue, which RabbitMQ lists too."""
    return {
        "source": "",
        "vhost": vhost,
        "destination": queue,
        "destination_type": "queue",
        "routing_key": queue,
        "arguments": {},
        "properties_key": properties_key(queue, {}),
    }


def vhost_bindings(vhost: str, view: VhostView) -> list[dict[str, Any]]:
    items = [default_binding(vhost, name) for name in view.queues]
    items.extend(binding_json(vhost, binding) for binding in view.bindings)
    items.extend(binding_json(vhost, binding) for binding in view.exchange_bindings)
    return items


async def list_bindings(call: Call) -> Response:
    items: list[dict[str, Any]] = []
    for vhost, _ in await call.listed_vhosts():
        handle = await call.pulsar_vhost(vhost)
        items.extend(vhost_bindings(vhost, handle.catalog.view))
    return json_response(200, arrange(items, call.query, []))


def _exchange_name(name: str) -> str:
    # The management API calls the default exchange amq.default in paths.
    return "" if name == "amq.default" else name


async def _between(
    call: Call, *, writing: bool = False
) -> tuple[str, list[Binding | ExchangeBinding]]:
    """The bindings from ``source`` to ``destination`` (both must exist: 404 otherwise)."""
    namespace, vhost, handle = await call.named_vhost(writing=writing)
    view = handle.catalog.view
    source = _exchange_name(call.params["source"])
    destination = call.params["destination"]
    if await call.exchange_in(namespace, handle, source) is None:
        raise not_found()
    found: list[Binding | ExchangeBinding] = []
    if call.params["kind"] == "q":
        if await call.queue_in(namespace, handle, destination) is None:
            raise not_found()
        found.extend(b for b in view.queue_bindings.get(destination, ()) if b.exchange == source)
    else:
        target = _exchange_name(destination)
        if await call.exchange_in(namespace, handle, target) is None:
            raise not_found()
        found.extend(
            b for b in view.exchange_bindings if b.source == source and b.destination == target
        )
    return vhost, found


async def list_between(call: Call) -> Response:
    vhost, found = await _between(call)
    items = [binding_json(vhost, binding) for binding in found]
    if call.params["kind"] == "q" and _exchange_name(call.params["source"]) == "":
        items.insert(0, default_binding(vhost, call.params["destination"]))
    return json_response(200, arrange(items, call.query, []))


async def post_binding(call: Call) -> Response:
    vhost, _ = await _between(call, writing=True)
    body = call.body()
    routing_key = string(body, "routing_key", "")
    args = arguments(body)
    handle = await call.vhost_for_writes(vhost)
    source = _exchange_name(call.params["source"])
    if call.params["kind"] == "q":
        command: Any = cmd.QueueBind(
            queue=call.params["destination"],
            exchange=source,
            routing_key=routing_key,
            arguments=args,
        )
        await amqp(handle.bind_queue(command, call.owner()))
    else:
        command = cmd.ExchangeBind(
            destination=_exchange_name(call.params["destination"]),
            source=source,
            routing_key=routing_key,
            arguments=args,
        )
        await amqp(handle.bind_exchange(command))
    location = f"{call.params['destination']}/{properties_key(routing_key, args)}"
    return Response(201, content_type=None, headers=(("location", location),))


async def _one(call: Call) -> tuple[str, Binding | ExchangeBinding]:
    vhost, found = await _between(call)
    wanted = call.params["props"]
    for binding in found:
        if properties_key(binding.routing_key, binding.arguments) == wanted:
            return vhost, binding
    if wanted == "~" or "~" not in wanted:
        # A key sent unquoted by hand (RabbitMQ unquotes each part of it too).
        key = "" if wanted == "~" else unquote_plus(wanted)
        for binding in found:
            if binding.routing_key == key and not binding.arguments:
                return vhost, binding
    raise not_found()


async def get_binding(call: Call) -> Response:
    vhost, binding = await _one(call)
    return json_response(200, binding_json(vhost, binding))


async def delete_binding(call: Call) -> Response:
    vhost, binding = await _one(call)
    handle = await call.vhost_for_writes(vhost)
    if isinstance(binding, Binding):
        await amqp(
            handle.unbind_queue(
                cmd.QueueUnbind(
                    queue=binding.queue,
                    exchange=binding.exchange,
                    routing_key=binding.routing_key,
                    arguments=binding.arguments,
                ),
                call.owner(),
            )
        )
    else:
        await amqp(
            handle.unbind_exchange(
                cmd.ExchangeUnbind(
                    destination=binding.destination,
                    source=binding.source,
                    routing_key=binding.routing_key,
                    arguments=binding.arguments,
                )
            )
        )
    return Response(204, content_type=None)
