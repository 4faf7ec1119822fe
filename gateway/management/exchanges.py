"""``/api/exchanges``: list, show, declare, delete, publish, and an exchange's bindings.

In paths the default exchange is ``amq.default`` (RabbitMQ's ``rabbit_mgmt_util:id``); in
JSON it is ``""``. Publishing goes through the backend's publish with ``mandatory`` set, so
``routed`` says whether any queue took the message, and the answer waits until Pulsar stored
it (as a publisher confirm would).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from gateway.amqp import commands as cmd
from gateway.amqp.properties import PROPERTY_FLAGS, MessageProperties, encode_properties
from gateway.backend.interface import Message
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.management.bindings import binding_json, default_binding
from gateway.management.context import Call, amqp
from gateway.management.errors import Response, bad_request, json_response, not_found
from gateway.management.fields import arguments, boolean, string
from gateway.management.listing import arrange
from gateway.model.entities import Exchange
from gateway.model.json_values import table_from_json, table_json

__all__ = [
    "delete_exchange",
    "exchange_bindings",
    "get_exchange",
    "list_exchanges",
    "publish",
    "put_exchange",
]


def exchange_name(name: str) -> str:
    return "" if name == "amq.default" else name


def exchange_json(vhost: str, exchange: Exchange) -> dict[str, Any]:
    return {
        "name": exchange.name,
        "vhost": vhost,
        "type": str(exchange.type),
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": table_json(exchange.arguments),
    }


async def list_exchanges(call: Call) -> Response:
    items: list[dict[str, Any]] = []
    for vhost, _ in await call.listed_vhosts():
        view = (await call.pulsar_vhost(vhost)).catalog.view
        items.extend(exchange_json(vhost, exchange) for exchange in view.exchanges.values())
    return json_response(200, arrange(items, call.query, ["vhost", "name"]))


async def _find(call: Call) -> tuple[str, PulsarVirtualHost, Exchange]:
    namespace, vhost, handle = await call.named_vhost()
    name = exchange_name(call.params["name"])
    exchange = await call.exchange_in(namespace, handle, name)
    if exchange is None:
        raise not_found()
    return vhost, handle, exchange


async def get_exchange(call: Call) -> Response:
    vhost, _, exchange = await _find(call)
    return json_response(200, {**exchange_json(vhost, exchange), "incoming": [], "outgoing": []})


async def put_exchange(call: Call) -> Response:
    namespace = await call.namespace(call.params["vhost"], writing=True)
    body = call.body()
    command = cmd.ExchangeDeclare(
        exchange=exchange_name(call.params["name"]),
        type=string(body, "type", "direct"),
        durable=boolean(body, "durable", False),
        auto_delete=boolean(body, "auto_delete", False),
        internal=boolean(body, "internal", False),
        arguments=arguments(body),
    )
    vhost = call.vhost_name(namespace)
    handle = await call.pulsar_vhost(vhost)
    existed = handle.catalog.exchange(handle.catalog.view, command.exchange) is not None
    writer = await call.vhost_for_writes(vhost)
    await amqp(writer.declare_exchange(command))
    return Response(204 if existed else 201, content_type=None)


async def delete_exchange(call: Call) -> Response:
    vhost, _, exchange = await _find(call)
    handle = await call.vhost_for_writes(vhost)
    command = cmd.ExchangeDelete(exchange.name, if_unused=call.query.get("if-unused") == "true")
    await amqp(handle.delete_exchange(command))
    return Response(204, content_type=None)


async def publish(call: Call) -> Response:
    vhost, _, exchange = await _find(call)
    body = call.body()
    routing_key = string(body, "routing_key")
    payload = string(body, "payload")
    encoding = string(body, "payload_encoding", "string")
    if encoding == "string":
        data = payload.encode()
    elif encoding == "base64":
        try:
            data = base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise bad_request("payload is not valid base64") from None
    else:
        raise bad_request(f"payload_encoding must be string or base64, not {encoding!r}")
    header = encode_properties(_properties(body.get("properties")))
    handle = await call.vhost_for_writes(vhost)
    outcome = await amqp(
        handle.publish(Message(exchange.name, routing_key, header, data), mandatory=True)
    )
    await amqp(outcome.stored.durable())
    return json_response(200, {"routed": outcome.routed})


def _properties(value: Any) -> MessageProperties:
    """RabbitMQ's ``properties`` object (``rabbit_mgmt_format:to_basic_properties``)."""
    if value is None or value == []:
        return MessageProperties()
    if not isinstance(value, dict):
        raise bad_request("properties must be a JSON object")
    values: dict[str, Any] = {}
    for key, item in value.items():
        if key not in PROPERTY_FLAGS:
            raise bad_request(f"unknown property {key!r}")
        if key == "headers":
            try:
                values[key] = table_from_json(item)
            except ValueError as error:
                raise bad_request(str(error)) from None
        elif key in ("delivery_mode", "priority", "timestamp"):
            if isinstance(item, bool) or not isinstance(item, int):
                raise bad_request(f"property {key} must be an integer, not {item!r}")
            values[key] = item
        elif isinstance(item, str):
            values[key] = item
        else:
            raise bad_request(f"property {key} must be a string, not {item!r}")
    try:
        properties = MessageProperties(**values)
        encode_properties(properties)
    except (ValueError, TypeError, OverflowError) as error:
        raise bad_request(f"invalid properties: {error}") from None
    return properties


async def exchange_bindings(call: Call) -> Response:
    vhost, handle, exchange = await _find(call)
    view = handle.catalog.view
    items: list[dict[str, Any]] = []
    if call.params["direction"] == "source":
        if exchange.name == "":
            items.extend(default_binding(vhost, name) for name in view.queues)
        items.extend(binding_json(vhost, b) for b in view.bindings if b.exchange == exchange.name)
        items.extend(
            binding_json(vhost, b) for b in view.exchange_bindings if b.source == exchange.name
        )
    else:
        items.extend(
            binding_json(vhost, b) for b in view.exchange_bindings if b.destination == exchange.name
        )
    return json_response(200, arrange(items, call.query, []))
