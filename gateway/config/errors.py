"""The one error type of the configuration, and the helpers that keep its message on one line."""

from __future__ import annotations


def _one_line(text: str) -> str:
    """Escape every non-printable character so that a message can never span lines."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class ConfigError(Exception):
    """Bad configuration. ``str(error)`` is one line naming the key and where it came from."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        message = _one_line(message)
        super().__init__(message)
        self.message = message
        #: The configuration key (or environment variable) at fault, when there is one.
        self.key = key

    def __str__(self) -> str:
        return self.message


class InvalidValue(Exception):
    """Raised by a value parser; turned into a ConfigError that names the key and source."""


def quoted(value: str, limit: int = 80) -> str:
    """A value quoted for an error message: repr (escapes control characters), shortened."""
    if len(value) > limit:
        value = value[:limit] + "..."
    return repr(value)
