"""gateway/management/fields.py: request body fields read as RabbitMQ reads them."""

from __future__ import annotations

import pytest

from gateway.amqp.fieldtable import Field
from gateway.management.errors import ApiError
from gateway.management.fields import arguments, boolean, integer, string


def reason(call: object) -> object:
    with pytest.raises(ApiError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.status == 400
    return caught.value.reason


def test_booleans_as_json_or_as_rabbitmqadmin_sends_them() -> None:
    assert boolean({"durable": True}, "durable", False) is True
    assert boolean({"durable": "false"}, "durable", True) is False
    assert boolean({}, "durable", True) is True
    assert boolean({"durable": None}, "durable", True) is True
    assert reason(lambda: boolean({"durable": "yes"}, "durable", False)) == ["not_boolean", "yes"]
    assert reason(lambda: boolean({"durable": 1}, "durable", False)) == ["not_boolean", "1"]


def test_strings_and_integers() -> None:
    assert string({"a": "x"}, "a") == "x"
    assert string({}, "a", "d") == "d"
    assert reason(lambda: string({}, "a")) == "[{key_missing,a}]"
    assert integer({"count": "5"}, "count") == 5
    assert reason(lambda: integer({"count": True}, "count")) == ["not_integer", "True"]


def test_arguments_become_a_table_with_rabbitmqs_types() -> None:
    assert arguments({"arguments": {"x-max-length": 10, "x-queue-type": "quorum"}}) == {
        "x-max-length": Field("l", 10),
        "x-queue-type": Field("S", "quorum"),
    }
    assert arguments({}) == {}
    assert "must be a JSON object" in str(reason(lambda: arguments({"arguments": [1]})))
