"""Fields of request bodies, read as RabbitMQ reads them (``rabbit_mgmt_util``): booleans may
be JSON booleans or the strings ``"true"``/``"false"`` (rabbitmqadmin sends strings), and a
wrong value is a 400 whose reason names it (``["not_boolean","yes"]``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.amqp.fieldtable import Field
from gateway.management.errors import bad_request
from gateway.model.json_values import table_from_json

__all__ = ["arguments", "boolean", "integer", "string"]


def boolean(body: Mapping[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return bool(value == "true")
    raise bad_request(["not_boolean", value if isinstance(value, str) else repr(value)])


def string(body: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = body.get(key, default)
    if value is None:
        raise bad_request(f"[{{key_missing,{key}}}]")
    if not isinstance(value, str):
        raise bad_request(f"{key} must be a string, not {value!r}")
    return value


def integer(body: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = body.get(key, default)
    if value is None:
        raise bad_request(f"[{{key_missing,{key}}}]")
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(["not_integer", value if isinstance(value, str) else repr(value)])
    return value


def arguments(body: Mapping[str, Any]) -> dict[str, Field]:
    """The ``arguments`` object as an AMQP table (JSON integers as ``l``, as RabbitMQ)."""
    try:
        return table_from_json(body.get("arguments"))
    except ValueError as error:
        raise bad_request(str(error)) from None
