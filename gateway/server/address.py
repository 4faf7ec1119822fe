"""Where the shell listens: :class:`Listener`, built by the configuration from ``amqpListeners``
(it lives in ``gateway/config/address.py``; the configuration imports nothing of the shell)."""

from gateway.config.address import UNIX_SCHEME, Listener, loopback_host

__all__ = ["UNIX_SCHEME", "Listener", "loopback_host"]
