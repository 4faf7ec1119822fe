"""Gateway configuration: the ``key=value`` file, ``STARLIGHT_<key>`` overrides, validation.

:class:`GatewayConfig` is the single source of truth: every field carries a :class:`ConfigKey`
in its metadata, so the key table of docs/configuration.md, ``conf/gateway.conf`` and the loader
are all generated from the same list (:func:`describe_keys`).  Everything that can go wrong with
user input surfaces as :class:`ConfigError`, whose message is one line naming the key (and
``file:line`` or the environment variable it came from).

The package, one job per module:

- ``keys``: what a key is (:class:`ConfigKey`, :class:`Section`, :class:`Kind`);
- ``schema``: :class:`GatewayConfig`, one field per key, a module per topic (add a key there);
- ``derived``: the values the gateway works out from the keys (``frame_max``, ...);
- ``values``: parsing and validation of one value, by kind;
- ``loading``: the file format, the environment, the rules across keys;
- ``documents``: the generated Markdown tables and ``conf/gateway.conf``;
- ``errors``: :class:`ConfigError`.

See ``docs/configuration.md`` for the decisions taken where the reference is silent.
"""

from __future__ import annotations

# The shell binds what amqpListeners lists: one listener type from here to the socket.
from gateway.config.address import Listener
from gateway.config.documents import EXAMPLE_VALUES, render_example_conf, render_markdown_table
from gateway.config.errors import ConfigError
from gateway.config.keys import (
    AMQP_FRAME_MIN_SIZE,
    ENV_PREFIX,
    UNIX_PEERS,
    ConfigKey,
    Kind,
    MetricsListener,
    Section,
)
from gateway.config.loading import config_from_text, load_config
from gateway.config.schema import GatewayConfig, describe_keys

__all__ = [
    "AMQP_FRAME_MIN_SIZE",
    "ENV_PREFIX",
    "EXAMPLE_VALUES",
    "UNIX_PEERS",
    "ConfigError",
    "ConfigKey",
    "GatewayConfig",
    "Kind",
    "Listener",
    "MetricsListener",
    "Section",
    "config_from_text",
    "describe_keys",
    "load_config",
    "render_example_conf",
    "render_markdown_table",
]
