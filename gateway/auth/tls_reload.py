"""Certificates replaced on disk are picked up without a restart (tlsCertRefreshCheckDurationSec).

Each new connection asks for the current context. At most once per refresh interval (on every
connection when it is 0, as the reference says) the files are stat'ed; if one changed, a new
context is built and used for connections from then on. Connections already open keep the
context they were accepted with: TLS does not re-authenticate a session.

A change that does not load (a key written before its certificate, a half-copied file) keeps
the previous context and is logged once on one line; it is retried when the files change again.
Nothing is read unless a file changed, and stat'ing two or three files costs microseconds, so
this runs on the event loop.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Callable

from gateway.auth.tls_context import TlsSettings, build_server_context
from gateway.config import ConfigError

__all__ = ["ReloadingContext"]

log = logging.getLogger("gateway.tls")

FileSignature = tuple[int, int, int, int] | None
Signature = tuple[FileSignature, ...]


def _signature(paths: tuple[str, ...]) -> Signature:
    """What changes when any of the files is replaced or rewritten (None: missing)."""
    result: list[FileSignature] = []
    for path in paths:
        try:
            status = os.stat(path)
        except OSError:
            result.append(None)
        else:
            result.append((status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns))
    return tuple(result)


class ReloadingContext:
    def __init__(
        self,
        settings: TlsSettings,
        now: float,
        *,
        build: Callable[[TlsSettings], ssl.SSLContext] = build_server_context,
    ) -> None:
        """Build the first context now: a ``ConfigError`` here stops the start-up."""
        self._settings = settings
        self._build = build
        self._signature = _signature(settings.files)
        self._context = build(settings)
        self._failed: Signature | None = None
        self._next_check = now + settings.refresh_interval
        #: How many times the context was rebuilt after start-up.
        self.reloads = 0

    def current(self, now: float) -> ssl.SSLContext:
        """The context for a connection accepted at ``now`` (a monotonic clock)."""
        if now >= self._next_check:
            self._next_check = now + self._settings.refresh_interval
            self._reload_if_changed()
        return self._context

    def _reload_if_changed(self) -> None:
        # Taken before building: a file replaced while we read it shows up as a change
        # at the next check, rather than being missed.
        signature = _signature(self._settings.files)
        if signature == self._signature or signature == self._failed:
            return
        try:
            context = self._build(self._settings)
        except (ConfigError, ssl.SSLError, OSError, ValueError) as error:
            # Whatever went wrong, accepting connections with the previous context goes on.
            self._failed = signature
            log.warning(
                "TLS files changed but cannot be loaded; keeping the previous ones: %s", error
            )
            return
        self._context = context
        self._signature = signature
        self._failed = None
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", ", ".join(self._settings.files))
