"""The schema: one :class:`GatewayConfig` field per key, in documentation order.

The keys, their names and their defaults are the contract of the reference documents
(``reference/002`` and ``reference/001``); a handful of gateway-specific keys are added and
marked as ours (``ours=True``).

The fields are declared by topic, one module per section, each class the base of the next:
a dataclass lists its bases' fields first, so the chain keeps the documentation order (the
key table, ``conf/gateway.conf``, the Helm schema and the proxy shim's keys follow it). Add a
key to the module of its topic, at its place in that order:

- ``amqp``: general and AMQP (the metadata store, the listeners, Connection.Tune);
- ``authentication``: SASL mechanisms and JWT keys;
- ``broker_client``: how the gateway reaches Pulsar;
- ``tls``: the amqps listeners' certificates and trust;
- ``vhosts``: the Pulsar tenant and namespace of a vhost;
- ``rollup``: the rollup job (the first gateway-specific keys);
- ``access``: vhosts created on demand, lazy subscriptions, priority read-ahead, authorization;
- ``observability``: metrics, the management API, the node's identity, usage events;
- ``runtime``: compiled modules, allocator, PROXY protocol, the ZooKeeper session.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from gateway.config.keys import ConfigKey
from gateway.config.schema.runtime import RuntimeKeys


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class GatewayConfig(RuntimeKeys):
    """The validated configuration: one attribute per key, named exactly like the key
    (camelCase, so that ``config.amqpListeners`` greps to the file and the reference).
    Derived values the server needs are snake_case properties (``frame_max``, ...).

    Build it with :func:`load_config` or :func:`config_from_text`; derive variants with
    :func:`dataclasses.replace` (which does not re-validate).
    """

    def __repr__(self) -> str:
        # Secrets (passwords, HMAC keys, broker credentials) never reach logs through repr.
        parts = []
        for spec in SCHEMA:
            value = getattr(self, spec.name)
            shown = "'<hidden>'" if spec.secret and value else repr(value)
            parts.append(f"{spec.name}={shown}")
        return f"GatewayConfig({', '.join(parts)})"


def _build_schema() -> tuple[ConfigKey, ...]:
    specs = []
    for f in dataclasses.fields(GatewayConfig):
        spec = f.metadata["key"]
        assert isinstance(spec, ConfigKey)
        specs.append(dataclasses.replace(spec, name=f.name))
    return tuple(specs)


SCHEMA: Final = _build_schema()
KEYS_BY_NAME: Final = {spec.name: spec for spec in SCHEMA}


def describe_keys() -> tuple[ConfigKey, ...]:
    """Every configuration key, in documentation order (sections as in the reference)."""
    return SCHEMA
