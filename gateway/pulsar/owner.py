"""What a producer or a consumer needs of the client that created it.

``client.py`` creates producers and consumers; they need only these few things back (the trio
token their callbacks go to, the C extension client, the deadline of a callback, whether the
compiled module is on, and to be tracked until closed). Naming them here, rather than
importing ``PulsarClient``, keeps the import graph of ``gateway/pulsar/`` free of circles.
"""

from __future__ import annotations

from typing import Any, Protocol

import trio


class CompiledSwitch(Protocol):
    """The client's options, as far as its producers and consumers read them."""

    @property
    def compiled(self) -> bool: ...


class ClientOwner(Protocol):
    """The :class:`~gateway.pulsar.client.PulsarClient` of a producer or a consumer."""

    @property
    def options(self) -> CompiledSwitch: ...

    @property
    def token(self) -> trio.lowlevel.TrioToken: ...

    @property
    def native(self) -> Any: ...

    @property
    def operation_deadline(self) -> float: ...

    def adopt(self, child: Any) -> None:
        """Track ``child`` until it closes."""

    def forget(self, child: Any) -> None:
        """Stop tracking ``child``."""
