"""AMQP field values compared and printed the way RabbitMQ (an Erlang program) does.

RabbitMQ decodes a field table into ``{Key, Type, Value}`` Erlang terms and compares values with
Erlang's ``==`` (headers exchange: ``PV == DV`` in ``rabbit_exchange_type_headers``; argument
equivalence: ``rabbit_misc:assert_args_equivalence``). So:

- the type tag is not part of a top-level value: a ``signedint`` 1 equals a ``long`` 1 and a
  ``timestamp`` 1, and integers equal floats numerically (``1 == 1.0``);
- strings (``S``) and byte arrays (``x``) are both binaries, equal when their octets are;
- booleans are the atoms ``true``/``false`` and equal no number or string;
- void is the atom ``undefined``; a decimal is the tuple ``{Scale, Unscaled}``;
- nested tables and arrays are lists of ``{Key, Type, Value}`` / ``{Type, Value}``, so inside
  them the type names matter.

Messages print values with ``~ts`` for binaries and ``~tp`` for everything else
(``rabbit_misc:val``).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Final

from gateway.amqp.fieldtable import Field

__all__ = [
    "TYPE_NAMES",
    "erlang_equal",
    "erlang_key",
    "format_field",
    "identical",
    "type_class",
    "type_name",
]

# RabbitMQ's names for the field types (rabbit_binary_parser), which its messages use.
TYPE_NAMES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "t": "bool",
        "b": "byte",
        "B": "unsignedbyte",
        "s": "short",
        "u": "unsignedshort",
        "I": "signedint",
        "i": "unsignedint",
        "l": "long",
        "L": "unsignedlong",
        "f": "float",
        "d": "double",
        "D": "decimal",
        "S": "longstr",
        "x": "binary",
        "T": "timestamp",
        "F": "table",
        "A": "array",
        "V": "void",
    }
)
# rabbit_misc:type_class: the integer types (and, oddly, decimal) form one class, float and
# double another; every other type is a class of its own.
_INT_CLASS: Final = frozenset("bBsuIilLD")
_FLOAT_CLASS: Final = frozenset("fd")
# Types whose Erlang value is a number.
_NUMBERS: Final = frozenset("bBsuIilLTfd")


def type_name(kind: str) -> str:
    return TYPE_NAMES.get(kind, kind)


def type_class(kind: str) -> str:
    if kind in _INT_CLASS:
        return "int"
    if kind in _FLOAT_CLASS:
        return "float"
    return type_name(kind)


def erlang_key(field: Field) -> tuple[Any, ...]:
    """A Python value that is == to another exactly when Erlang's == holds for the terms."""
    kind, value = field.kind, field.value
    if kind in _NUMBERS:
        if isinstance(value, bool):  # never: t is a separate tag, but keep 1 != True honest
            return ("atom", "true" if value else "false")
        return ("number", value)
    if kind == "S" or kind == "x":
        return ("binary", value.encode("utf-8") if isinstance(value, str) else bytes(value))
    if kind == "t":
        return ("atom", "true" if value else "false")
    if kind == "V":
        return ("atom", "undefined")
    if kind == "D":
        return ("tuple", decimal_parts(value))
    if kind == "F":
        return (
            "list",
            tuple((key, type_name(f.kind), erlang_key(f)) for key, f in value.items()),
        )
    if kind == "A":
        return ("list", tuple((type_name(f.kind), erlang_key(f)) for f in value))
    return ("other", kind, repr(value))


def erlang_equal(a: Field, b: Field) -> bool:
    """Erlang ``==`` on the two values (type tags ignored at the top level)."""
    return erlang_key(a) == erlang_key(b)


def identical(a: Field, b: Field) -> bool:
    """Erlang ``=:=`` on the two values: like ``==`` but an integer never equals a float."""
    ka, kb = erlang_key(a), erlang_key(b)
    if ka[0] == "number" and kb[0] == "number":
        return type(ka[1]) is type(kb[1]) and ka[1] == kb[1]
    return ka == kb


def decimal_parts(value: Any) -> tuple[int, int]:
    """A decimal as RabbitMQ holds it: ``(scale, unscaled)``, ``Decimal("1.23")`` → (2, 123)."""
    if isinstance(value, Decimal):
        sign, digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0")
        if not isinstance(exponent, int):
            return 0, 0
        if exponent > 0:
            unscaled *= 10**exponent
            exponent = 0
        return -exponent, -unscaled if sign else unscaled
    return 0, int(value)


def format_field(field: Field) -> str:
    """A value as RabbitMQ prints it in a reply text (``~ts`` for binaries, else ``~tp``)."""
    kind, value = field.kind, field.value
    if kind == "S" or kind == "x":
        if isinstance(value, str):
            return value
        return bytes(value).decode("utf-8", "replace")
    return _term(field)


def _term(field: Field) -> str:
    kind, value = field.kind, field.value
    if kind == "t":
        return "true" if value else "false"
    if kind == "V":
        return "undefined"
    if kind in _FLOAT_CLASS:
        return _float(float(value))
    if kind == "D":
        scale, unscaled = decimal_parts(value)
        return f"{{{scale},{unscaled}}}"
    if kind == "S" or kind == "x":
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return f'<<"{raw.decode("utf-8", "replace")}">>'
    if kind == "F":
        items = ",".join(
            f'{{<<"{key}">>,{type_name(f.kind)},{_term(f)}}}' for key, f in value.items()
        )
        return f"[{items}]"
    if kind == "A":
        return "[" + ",".join(f"{{{type_name(f.kind)},{_term(f)}}}" for f in value) + "]"
    return str(value)


def _float(value: float) -> str:
    # Erlang prints the shortest round-trip digits with ".0" and a bare exponent: 1.0e-5.
    text = repr(value)
    if "e" in text:
        mantissa, exponent = text.split("e")
        if "." not in mantissa:
            mantissa += ".0"
        return f"{mantissa}e{int(exponent)}"
    return text


def erlang_term(field: Field) -> str:
    """A value printed with ``~tp`` (binaries as ``<<"…">>``), as in binding error texts."""
    return _term(field)
