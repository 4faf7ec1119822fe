"""Reading a file that a configuration key names, its failure said as that key's error."""

from __future__ import annotations

from gateway.config import ConfigError

__all__ = ["read_file"]


def read_file(path: str, key_name: str, what: str = "") -> bytes:
    """The bytes of ``path``; a :class:`ConfigError` naming ``key_name`` (and ``what`` the file
    holds, when given) and the reason, on one line, if it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        subject = f"{what} {path}" if what else path
        raise ConfigError(f"{key_name}: cannot read {subject}: {reason}", key=key_name) from None
