"""AMQP virtual host → Pulsar tenant/namespace, exactly as the reference maps it.

reference/001 and reference/002 ("Multi-tenancy and VHosts"), with the keys
``amqpDefaultTenant`` (``public``), ``amqpDefaultNamespace`` (``default``) and
``amqpMapShortVhostToTenant`` (``false``):

- ``/`` → ``<amqpDefaultTenant>/<amqpDefaultNamespace>``;
- ``/x`` or ``x`` → ``<amqpDefaultTenant>/x``, or ``x/<amqpDefaultNamespace>`` when short vhosts
  map to tenants;
- ``/t/n`` or ``t/n`` → ``t/n``.

The reference's own code strips one leading ``/`` and treats what is left being empty as the
empty vhost, so the empty string maps like ``/`` (RabbitMQ would refuse it as unknown; the
reference wins). Anything else — three or more segments, an empty segment (``//``, ``/a/``,
``a//b``), characters outside Pulsar's set — cannot name a namespace and is refused the way
RabbitMQ refuses an unknown vhost: Connection.Close 530 ``NOT_ALLOWED - vhost x not found``,
here with the reason appended.

Pulsar's rule for tenant and namespace names is ``NamedEntity.checkName``
(pulsar-common ``org.apache.pulsar.common.naming.NamedEntity``): the Java pattern
``^[-=:.\\w]*$`` where ``\\w`` is ASCII ``[a-zA-Z_0-9]``, and ``NamespaceName`` additionally
refuses empty parts. Pulsar sets no length limit on these names (apache/pulsar#12023: "Pulsar
didn't introduce the length limit for the name of tenants, namespaces and topic"); a vhost is an
AMQP shortstr, so it is at most 255 octets anyway. ``.`` and ``..`` pass ``checkName`` but are
refused here: Pulsar keeps namespace policies at ``/admin/policies/<tenant>/<namespace>`` in
ZooKeeper, which refuses those path elements ("relative paths not allowed"), and in the admin
REST API's URLs they would be resolved as relative path segments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Protocol

from gateway.amqp.errors import ConnectionException, ReplyCode

__all__ = [
    "InvalidVhost",
    "Namespace",
    "VhostMapper",
    "VhostMappingKeys",
    "pulsar_name_problem",
]

# NamedEntity.NAMED_ENTITY_PATTERN, with Java's ASCII-only \w spelled out.
_PULSAR_NAME: Final = re.compile(r"[-=:.a-zA-Z0-9_]+")
# Connection.Open is class 10, method 40: the only method that names a vhost.
_CONNECTION_OPEN: Final = (10, 40)


def pulsar_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a Pulsar tenant or namespace name, or None when it can."""
    if not name:
        return "empty name"
    if not _PULSAR_NAME.fullmatch(name):
        bad = sorted({ch for ch in name if not _PULSAR_NAME.fullmatch(ch)})
        shown = "".join(bad)
        return f"character(s) {shown!r} not allowed in Pulsar names (allowed: a-zA-Z0-9_-=:.)"
    if name in (".", ".."):
        return f"{name!r} is not usable as a Pulsar name"
    return None


@dataclass(frozen=True, slots=True)
class Namespace:
    """A Pulsar namespace, ``tenant/namespace``."""

    tenant: str
    namespace: str

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @classmethod
    def parse(cls, text: str) -> Namespace:
        """``"t/n"`` → ``Namespace("t", "n")``; ValueError for anything that is not one."""
        parts = text.split("/")
        if len(parts) != 2:
            raise ValueError(f"not a tenant/namespace: {text!r}")
        for part in parts:
            problem = pulsar_name_problem(part)
            if problem is not None:
                raise ValueError(f"not a tenant/namespace: {text!r} ({problem})")
        return cls(parts[0], parts[1])


class InvalidVhost(ConnectionException):
    """A vhost that maps to no Pulsar namespace: Connection.Close 530 NOT_ALLOWED."""

    def __init__(self, vhost: str, reason: str) -> None:
        # RabbitMQ's wording for a vhost it does not have is "vhost x not found"
        # (rabbit_reader); we keep it and say why it cannot exist here.
        super().__init__(
            ReplyCode.NOT_ALLOWED, f"vhost {vhost} not found: {reason}", *_CONNECTION_OPEN
        )
        self.vhost = vhost
        self.reason = reason


class VhostMappingKeys(Protocol):
    """The reference's three vhost-mapping keys, as the gateway's configuration holds them."""

    @property
    def amqpDefaultTenant(self) -> str: ...

    @property
    def amqpDefaultNamespace(self) -> str: ...

    @property
    def amqpMapShortVhostToTenant(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class VhostMapper:
    """Maps vhosts to namespaces with the reference's three configuration keys."""

    default_tenant: str = "public"
    default_namespace: str = "default"
    map_short_vhost_to_tenant: bool = False

    @classmethod
    def from_keys(cls, keys: VhostMappingKeys) -> VhostMapper:
        """The mapper of a configuration (anything with the three keys)."""
        return cls(
            keys.amqpDefaultTenant, keys.amqpDefaultNamespace, keys.amqpMapShortVhostToTenant
        )

    def __post_init__(self) -> None:
        for key, value in (
            ("default_tenant", self.default_tenant),
            ("default_namespace", self.default_namespace),
        ):
            problem = pulsar_name_problem(value)
            if problem is not None:
                raise ValueError(f"{key} {value!r}: {problem}")

    def namespace_for(self, vhost: str) -> Namespace:
        """The namespace of ``vhost``; raises InvalidVhost (530) when there is none."""
        rest = vhost[1:] if vhost.startswith("/") else vhost
        if not rest:
            return Namespace(self.default_tenant, self.default_namespace)
        segments = rest.split("/")
        if len(segments) > 2:
            raise InvalidVhost(
                vhost,
                f"{len(segments)} segments; expected /, /<name> or /<tenant>/<namespace>",
            )
        for segment in segments:
            if not segment:
                raise InvalidVhost(vhost, "empty segment")
            problem = pulsar_name_problem(segment)
            if problem is not None:
                raise InvalidVhost(vhost, problem)
        if len(segments) == 2:
            return Namespace(segments[0], segments[1])
        if self.map_short_vhost_to_tenant:
            return Namespace(segments[0], self.default_namespace)
        return Namespace(self.default_tenant, segments[0])

    def vhost_name(self, namespace: Namespace) -> str:
        """The shortest vhost name that maps to ``namespace``: ``/`` for the default
        namespace, ``<namespace>`` (or ``<tenant>`` when short vhosts map to tenants) for the
        short form, ``<tenant>/<namespace>`` otherwise. ``namespace_for`` of it is
        ``namespace`` again. Aliases (``orders``, ``/orders``, ``public/orders``) are one
        vhost; this is the name every replica shows it under (``vhosts list``, the ``vhost``
        label of the metrics), whichever alias its clients used."""
        if namespace == Namespace(self.default_tenant, self.default_namespace):
            return "/"
        if self.map_short_vhost_to_tenant:
            if namespace.namespace == self.default_namespace:
                return namespace.tenant
        elif namespace.tenant == self.default_tenant:
            return namespace.namespace
        return f"{namespace.tenant}/{namespace.namespace}"

    def canonical(self, vhost: str) -> str:
        """``vhost_name(namespace_for(vhost))``: ``/orders`` -> ``orders``; a name that maps
        to no namespace is returned as it is."""
        try:
            return self.vhost_name(self.namespace_for(vhost))
        except InvalidVhost:
            return vhost
