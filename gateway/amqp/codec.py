"""Method payloads: strict decoding and validation-free encoding, driven by pamqp's spec.

pamqp's generated classes are the source of truth for *what* each method carries (field names,
AMQP types, order), and its objects are what the rest of the gateway handles. Its marshalling
is not used on the server's inbound path because it is too lax — a short string whose length
runs past the payload is silently truncated, trailing bytes are ignored, and decoding can
raise ``OverflowError``/``RecursionError`` that escape its own exception type — and not on the
outbound path because it validates names against a regex narrower than what RabbitMQ accepts
(NOTES: a queue accepted on declare could not be named in Declare-Ok). So this module walks
pamqp's field metadata with its own primitives:

* decoding is exact: every length is checked, the payload must be consumed to the last octet
  (RabbitMQ's generated decoder matches the whole binary), short strings must be UTF-8;
* encoding never validates names, and tables keep their key order and explicit types.

Errors are ``ConnectionException``\\s: 501 FRAME_ERROR for a payload that does not parse (as
RabbitMQ's ``rabbit_misc:frame_error``), 502 SYNTAX_ERROR for a value that parses but is
illegal (invalid UTF-8 in a short string), 540 NOT_IMPLEMENTED for an unknown class/method.
"""

from __future__ import annotations

import datetime
import re
import struct
from dataclasses import dataclass
from typing import Any

from pamqp import base, commands

from gateway.amqp.errors import ConnectionException, ReplyCode
from gateway.amqp.fieldtable import (
    FieldDecodeError,
    decode_table,
    encode_table,
    table_to_plain,
)
from gateway.amqp.framing import method_frame

__all__ = [
    "CLIENT_METHODS",
    "CONTENT_METHODS",
    "SPECS",
    "MethodSpec",
    "decode_method",
    "encode_method",
    "encode_method_frame",
    "make_method",
    "method_name",
]

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


@dataclass(frozen=True, slots=True)
class MethodSpec:
    cls: type[base.Frame]
    class_id: int
    method_id: int
    name: str  # RabbitMQ's spelling, e.g. "basic.get_ok"
    fields: tuple[tuple[str, str], ...]  # (attribute, AMQP type)
    has_content: bool


def _rabbit_name(pamqp_name: str) -> str:
    klass, method = pamqp_name.split(".")
    snake = re.sub(r"(?<!^)([A-Z])", r"_\1", method).lower()
    return f"{klass.lower()}.{snake}"


# §4.2.6: the methods that are followed by a content header and body.
CONTENT_METHODS: frozenset[type[base.Frame]] = frozenset(
    {commands.Basic.Publish, commands.Basic.Return, commands.Basic.Deliver, commands.Basic.GetOk}
)


def _build_specs() -> dict[int, MethodSpec]:
    specs: dict[int, MethodSpec] = {}
    mapping: dict[int, type[base.Frame]] = commands.INDEX_MAPPING
    for index, cls in mapping.items():
        specs[index] = MethodSpec(
            cls=cls,
            class_id=index >> 16,
            method_id=index & 0xFFFF,
            name=_rabbit_name(cls.name),
            fields=tuple((attr, cls.amqp_type(attr)) for attr in cls.__slots__),
            has_content=cls in CONTENT_METHODS,
        )
    return specs


SPECS: dict[int, MethodSpec] = _build_specs()
_SPEC_BY_CLASS: dict[type[base.Frame], MethodSpec] = {s.cls: s for s in SPECS.values()}

# What a client may send (the spec's "client → server" direction, plus the replies a client
# gives to server-initiated methods). Anything else from a client is 503 COMMAND_INVALID.
CLIENT_METHODS: frozenset[type[base.Frame]] = frozenset(
    {
        commands.Connection.StartOk,
        commands.Connection.SecureOk,
        commands.Connection.TuneOk,
        commands.Connection.Open,
        commands.Connection.Close,
        commands.Connection.CloseOk,
        commands.Connection.UpdateSecret,
        commands.Channel.Open,
        commands.Channel.Flow,
        commands.Channel.FlowOk,
        commands.Channel.Close,
        commands.Channel.CloseOk,
        commands.Exchange.Declare,
        commands.Exchange.Delete,
        commands.Exchange.Bind,
        commands.Exchange.Unbind,
        commands.Queue.Declare,
        commands.Queue.Bind,
        commands.Queue.Purge,
        commands.Queue.Delete,
        commands.Queue.Unbind,
        commands.Basic.Qos,
        commands.Basic.Consume,
        commands.Basic.Cancel,
        commands.Basic.Publish,
        commands.Basic.Get,
        commands.Basic.Ack,
        commands.Basic.Reject,
        commands.Basic.RecoverAsync,
        commands.Basic.Recover,
        commands.Basic.Nack,
        commands.Tx.Select,
        commands.Tx.Commit,
        commands.Tx.Rollback,
        commands.Confirm.Select,
    }
)


def spec_for(method: base.Frame | type[base.Frame]) -> MethodSpec:
    cls = method if isinstance(method, type) else type(method)
    return _SPEC_BY_CLASS[cls]


def method_name(method: base.Frame | type[base.Frame]) -> str:
    """RabbitMQ's name for a method, e.g. ``basic.publish``."""
    return spec_for(method).name


# --------------------------------------------------------------------------------- decoding


def _frame_error(spec: MethodSpec | None, why: str) -> ConnectionException:
    if spec is None:
        return ConnectionException(ReplyCode.FRAME_ERROR, why)
    return ConnectionException(
        ReplyCode.FRAME_ERROR,
        f"cannot decode {spec.name}: {why}",
        spec.class_id,
        spec.method_id,
    )


def decode_method(payload: bytes, *, typed_tables: bool = False) -> base.Frame:
    """Decode a whole method frame payload (class id, method id, arguments).

    Tables come out as plain Python values, or with ``typed_tables`` as ``Field`` tables that
    keep every value's AMQP type (entity arguments: equivalence checks and headers-exchange
    matching compare types, which plain values would lose).
    """
    if len(payload) < 4:
        raise _frame_error(None, f"method frame of {len(payload)} octets has no method id")
    (index,) = _U32.unpack_from(payload, 0)
    spec = SPECS.get(index)
    if spec is None:
        raise ConnectionException(
            ReplyCode.NOT_IMPLEMENTED,
            f"unknown method {index >> 16}.{index & 0xFFFF}",
            index >> 16,
            index & 0xFFFF,
        )
    method = spec.cls.__new__(spec.cls)
    end = len(payload)
    offset = 4
    bit = 8  # 8 = no octet of bits open
    bits = 0
    for attr, kind in spec.fields:
        if kind == "bit":
            if bit == 8:
                if offset >= end:
                    raise _frame_error(spec, f"missing {attr}")
                bits = payload[offset]
                offset += 1
                bit = 0
            setattr(method, attr, bool(bits & (1 << bit)))
            bit += 1
            continue
        bit = 8
        if kind == "shortstr":
            if offset >= end:
                raise _frame_error(spec, f"missing {attr}")
            stop = offset + 1 + payload[offset]
            if stop > end:
                raise _frame_error(spec, f"{attr} runs past the end of the frame")
            try:
                value: Any = payload[offset + 1 : stop].decode("utf-8")
            except UnicodeDecodeError:
                raise ConnectionException(
                    ReplyCode.SYNTAX_ERROR,
                    f"{attr} of {spec.name} is not valid UTF-8",
                    spec.class_id,
                    spec.method_id,
                ) from None
            offset = stop
        elif kind == "short":
            if offset + 2 > end:
                raise _frame_error(spec, f"missing {attr}")
            (value,) = _U16.unpack_from(payload, offset)
            offset += 2
        elif kind == "long":
            if offset + 4 > end:
                raise _frame_error(spec, f"missing {attr}")
            (value,) = _U32.unpack_from(payload, offset)
            offset += 4
        elif kind == "longlong" or kind == "timestamp":
            if offset + 8 > end:
                raise _frame_error(spec, f"missing {attr}")
            (value,) = _U64.unpack_from(payload, offset)
            offset += 8
        elif kind == "octet":
            if offset >= end:
                raise _frame_error(spec, f"missing {attr}")
            value = payload[offset]
            offset += 1
        elif kind == "longstr":
            if offset + 4 > end:
                raise _frame_error(spec, f"missing {attr}")
            stop = offset + 4 + _U32.unpack_from(payload, offset)[0]
            if stop > end:
                raise _frame_error(spec, f"{attr} runs past the end of the frame")
            # Kept as bytes: SASL responses and secrets are binary.
            value = payload[offset + 4 : stop]
            offset = stop
        elif kind == "table":
            try:
                table, offset = decode_table(payload, offset, end)
            except FieldDecodeError as error:
                raise _frame_error(spec, f"{attr}: {error}") from None
            value = table if typed_tables else table_to_plain(table)
        else:  # pragma: no cover - pamqp's spec has no other method field types
            raise AssertionError(f"unexpected AMQP type {kind}")
        setattr(method, attr, value)
    if offset != end:
        raise _frame_error(spec, f"{end - offset} unexpected octets after the arguments")
    return method


# --------------------------------------------------------------------------------- encoding

_DEFAULTS: dict[str, Any] = {
    "bit": False,
    "octet": 0,
    "short": 0,
    "long": 0,
    "longlong": 0,
    "timestamp": 0,
    "shortstr": "",
    "longstr": b"",
    "table": None,
}


def make_method(cls: type[base.Frame], **values: Any) -> base.Frame:
    """Build a pamqp method object without running pamqp's validation.

    pamqp's constructors check exchange/queue names against ``^[a-zA-Z0-9-_.:@#,/+ ]*$`` and
    127 characters; RabbitMQ accepts any UTF-8 up to 255 octets, and so do we, so e.g. a
    Queue.Declare-Ok naming ``"файл"`` must be built with this. Unset fields get the zero
    value of their type.
    """
    spec = _SPEC_BY_CLASS[cls]
    method = cls.__new__(cls)
    known = {attr for attr, _kind in spec.fields}
    unknown = set(values) - known
    if unknown:
        raise TypeError(f"{spec.name} has no field(s) {sorted(unknown)}")
    for attr, kind in spec.fields:
        setattr(method, attr, values.get(attr, _DEFAULTS[kind]))
    return method


def _encode_shortstr(attr: str, value: Any) -> bytes:
    raw = value.encode("utf-8") if isinstance(value, str) else bytes(value or b"")
    if len(raw) > 255:
        raise ValueError(f"{attr} is longer than 255 octets")
    return bytes((len(raw),)) + raw


def encode_method(method: base.Frame) -> bytes:
    """Encode a method payload (class id, method id, arguments); no name validation.

    ``None`` stands for the zero value of a field's type (pamqp leaves some defaults None).
    """
    spec = _SPEC_BY_CLASS[type(method)]
    parts: list[bytes] = [_U32.pack((spec.class_id << 16) | spec.method_id)]
    bit = -1  # -1 = no octet of bits open
    bits = 0
    for attr, kind in spec.fields:
        value = getattr(method, attr, None)
        if kind == "bit":
            if bit == -1 or bit == 8:
                if bit == 8:
                    parts.append(bytes((bits,)))
                bits, bit = 0, 0
            if value:
                bits |= 1 << bit
            bit += 1
            continue
        if bit != -1:
            parts.append(bytes((bits,)))
            bit = -1
        if kind == "shortstr":
            parts.append(_encode_shortstr(attr, value))
        elif kind == "short":
            parts.append(_U16.pack(value or 0))
        elif kind == "long":
            parts.append(_U32.pack(value or 0))
        elif kind == "longlong":
            parts.append(_U64.pack(value or 0))
        elif kind == "timestamp":
            if isinstance(value, datetime.datetime):
                value = int(value.timestamp())
            parts.append(_U64.pack(value or 0))
        elif kind == "octet":
            parts.append(bytes((value or 0,)))
        elif kind == "longstr":
            raw = value.encode("utf-8") if isinstance(value, str) else bytes(value or b"")
            parts.append(_U32.pack(len(raw)) + raw)
        elif kind == "table":
            parts.append(encode_table(value))
        else:  # pragma: no cover
            raise AssertionError(f"unexpected AMQP type {kind}")
    if bit != -1:
        parts.append(bytes((bits,)))
    return b"".join(parts)


def encode_method_frame(channel: int, method: base.Frame) -> bytes:
    return method_frame(channel, encode_method(method))
