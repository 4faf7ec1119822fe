"""AMQP field values as JSON and back, as RabbitMQ's management API writes and reads them.

Out (``rabbit_mgmt_format:amqp_table``): numbers stay numbers, strings strings, tables objects,
arrays lists, void ``null``; what JSON has no type for becomes what a person would read:
byte strings as text (UTF-8, undecodable bytes replaced), decimals as numbers, timestamps as
seconds since the epoch.

In (``rabbit_mgmt_util:args`` → ``rabbit_misc:to_amqp_table``): JSON integers become ``l``
(64-bit signed) as RabbitMQ makes them, floats ``d``, strings ``S``, booleans ``t``, objects
``F``, lists ``A``, ``null`` ``V``.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from gateway.amqp.fieldtable import Field

__all__ = ["NotATable", "field_from_json", "json_value", "table_from_json", "table_json"]


class NotATable(ValueError):
    """A JSON value that is not an object where arguments are expected."""


def json_value(value: Any) -> Any:
    """A plain Python value (``field_to_plain``'s, pamqp's, or a ``Field``) as JSON data."""
    if isinstance(value, Field):
        if value.kind == "T" and isinstance(value.value, int):
            return value.value
        value = value.value
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, Mapping):
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    return str(value)


def table_json(table: Mapping[str, Any]) -> dict[str, Any]:
    return {str(key): json_value(value) for key, value in table.items()}


def field_from_json(value: Any) -> Field:
    if value is None:
        return Field("V", None)
    if isinstance(value, bool):
        return Field("t", value)
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            raise ValueError(f"integer {value} does not fit a 64-bit signed AMQP long")
        return Field("l", value)
    if isinstance(value, float):
        return Field("d", value)
    if isinstance(value, str):
        return Field("S", value)
    if isinstance(value, Mapping):
        return Field("F", table_from_json(value))
    if isinstance(value, list):
        return Field("A", [field_from_json(item) for item in value])
    raise ValueError(f"not a JSON value: {value!r}")


def table_from_json(value: Any) -> dict[str, Field]:
    """The arguments of a request body (``{}`` for a missing or null one)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise NotATable(f"arguments must be a JSON object, not {value!r}")
    return {str(key): field_from_json(item) for key, item in value.items()}
