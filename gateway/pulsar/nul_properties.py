"""Pulsar properties with a NUL character, written so that the compiled module reads them whole.

Pulsar's C API, which the compiled module (native/) sends and receives through, takes and
gives properties as C strings: a NUL character would end a key or value there. pulsar-client's
binding carries them whole, so the gateway's producers send such a message through the binding
(producer.py) and write its NUL-carrying properties a second time, as JSON (which escapes NUL)
under ``ESCAPED_KEY``; a message read back puts them back in place (``restored``) and drops the
key, whichever listener read it. Only messages that have such a property pay anything beyond
one dict lookup on receipt.

Not covered: a NUL in a property written by a native Pulsar producer reaches the gateway's
compiled listener cut at the NUL (docs/compatibility.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

__all__ = ["ESCAPED_KEY", "restored", "with_escaped"]

ESCAPED_KEY: Final = "starlight-nul-properties"


def with_escaped(properties: Mapping[str, str]) -> Mapping[str, str]:
    """``properties``, plus ``ESCAPED_KEY`` if any key or value holds a NUL (else unchanged)."""
    escaped = {
        key: value
        for key, value in properties.items()
        if isinstance(key, str) and isinstance(value, str) and ("\0" in key or "\0" in value)
    }
    if not escaped:
        return properties
    # A key that is also the cut form of another one is overwritten in the C API's reading:
    # it travels escaped too.
    for key in list(escaped):
        cut = key.split("\0", 1)[0]
        if cut != key and cut in properties:
            escaped[cut] = properties[cut]
    return {**properties, ESCAPED_KEY: json.dumps(escaped)}


def restored(properties: dict[str, str]) -> dict[str, str]:
    """A message's properties as written: the escaped ones back in place (their cut forms, as
    the C API reads them, dropped). Changes and returns ``properties``."""
    escaped = properties.pop(ESCAPED_KEY, None)
    if escaped is None:
        return properties
    try:
        whole = json.loads(escaped)
    except ValueError:
        return properties  # not ours after all: left as it came
    if not isinstance(whole, dict):
        return properties
    entries = [(k, v) for k, v in whole.items() if isinstance(k, str) and isinstance(v, str)]
    for key, _ in entries:
        cut = key.split("\0", 1)[0]
        if cut != key:
            properties.pop(cut, None)
    properties.update(entries)  # a real key equal to a cut form is among them (with_escaped)
    return properties
