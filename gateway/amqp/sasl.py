"""Decoding SASL responses from Connection.Start-Ok (the decision stays with the shell).

* PLAIN (RFC 4616): ``authzid NUL authcid NUL passwd``, UTF-8.
* AMQPLAIN (RabbitMQ/py-amqp): the *entries* of a field table, without the table's 4-octet
  length prefix, holding ``LOGIN`` and ``PASSWORD`` (py-amqp, kombu's default transport,
  strips the prefix; RabbitMQ's ``rabbit_auth_mechanism_amqplain`` parses the rest as a table).

Garbage raises ``AMQPError`` 403 ACCESS_REFUSED so that a malformed login is reported to the
client the same way as a wrong password. (RabbitMQ answers a malformed PLAIN response with 502
SYNTAX_ERROR during the handshake; clients report both as a failed login.)
"""

from __future__ import annotations

from gateway.amqp.errors import AMQPError, ReplyCode
from gateway.amqp.fieldtable import FieldDecodeError, decode_table_body

__all__ = ["parse_amqplain", "parse_plain"]


def _refuse(mechanism: str, why: str) -> AMQPError:
    return AMQPError(ReplyCode.ACCESS_REFUSED, f"{mechanism} login refused: {why}", 10, 11)


def parse_plain(response: bytes) -> tuple[str, str, str]:
    """Return (authzid, user, password); authzid is usually empty."""
    parts = bytes(response).split(b"\x00")
    if len(parts) != 3:
        raise _refuse("PLAIN", "response is not 'authzid NUL user NUL password'")
    try:
        authzid, user, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        raise _refuse("PLAIN", "response is not valid UTF-8") from None
    if not user:
        raise _refuse("PLAIN", "empty user name")
    return authzid, user, password


def parse_amqplain(response: bytes) -> tuple[str, str]:
    """Return (login, password)."""
    raw = bytes(response)
    try:
        table = decode_table_body(raw, 0, len(raw))
    except (FieldDecodeError, IndexError):
        raise _refuse("AMQPLAIN", "response is not a field table") from None
    values: list[str] = []
    for key in ("LOGIN", "PASSWORD"):
        field = table.get(key)
        if field is None:
            raise _refuse("AMQPLAIN", f"no {key} in the response")
        value = field.value
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                raise _refuse("AMQPLAIN", f"{key} is not valid UTF-8") from None
        if not isinstance(value, str):
            raise _refuse("AMQPLAIN", f"{key} is not a string")
        values.append(value)
    return values[0], values[1]
