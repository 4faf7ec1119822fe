"""SASL parsing: PLAIN and AMQPLAIN responses, and garbage refused with 403."""

from __future__ import annotations

import pytest

from gateway.amqp.errors import AMQPError, ReplyCode
from gateway.amqp.fieldtable import Field, encode_table
from gateway.amqp.sasl import parse_amqplain, parse_plain


def test_parse_plain() -> None:
    assert parse_plain(b"\x00guest\x00guest") == ("", "guest", "guest")
    assert parse_plain(b"admin\x00user\x00p\xc3\xa9") == ("admin", "user", "pé")


@pytest.mark.parametrize(
    "response", [b"", b"guest", b"\x00guest", b"a\x00b\x00c\x00d", b"\x00\xff\x00p", b"\x00\x00p"]
)
def test_parse_plain_garbage_is_403(response: bytes) -> None:
    with pytest.raises(AMQPError) as caught:
        parse_plain(response)
    assert caught.value.reply_code == ReplyCode.ACCESS_REFUSED


def test_parse_amqplain_as_py_amqp_sends_it() -> None:
    body = encode_table({"LOGIN": "guest", "PASSWORD": "secret"})[4:]
    assert parse_amqplain(body) == ("guest", "secret")
    binary = encode_table({"LOGIN": Field("S", b"u"), "PASSWORD": Field("S", b"p")})[4:]
    assert parse_amqplain(binary) == ("u", "p")


@pytest.mark.parametrize(
    "response",
    [
        b"garbage",
        encode_table({"LOGIN": "guest"})[4:],
        encode_table({"LOGIN": 1, "PASSWORD": "x"})[4:],
        encode_table({"LOGIN": Field("S", b"\xff"), "PASSWORD": "x"})[4:],
    ],
)
def test_parse_amqplain_garbage_is_403(response: bytes) -> None:
    with pytest.raises(AMQPError) as caught:
        parse_amqplain(response)
    assert caught.value.reply_code == ReplyCode.ACCESS_REFUSED
