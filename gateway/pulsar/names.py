"""Full Pulsar topic names, split into parts and turned into admin REST paths.

A full name is ``persistent://tenant/namespace/local``. The local part is everything after the
second ``/`` of the path, so it may itself contain ``/`` (Pulsar accepts that, but see
docs/pulsar-layer.md: such topics do not show up in the namespace's topic list) and any other
character the mapping layer's encoding produces.

The admin REST API takes each part as one URL path segment. The broker decodes segments with
Java's ``URLDecoder`` (``Codec.decode``), which turns ``+`` into a space, so every character
outside the RFC 3986 unreserved set is percent-encoded here, ``+``, ``/`` and ``%`` included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

Domain = Literal["persistent", "non-persistent"]
_DOMAINS: tuple[Domain, ...] = ("persistent", "non-persistent")


def quote_segment(part: str) -> str:
    """Percent-encode one REST path segment (UTF-8; nothing is left "safe", not even ``/``)."""
    return quote(part, safe="")


@dataclass(frozen=True, slots=True)
class TopicName:
    """A parsed full topic name; ``str()`` gives the full name back."""

    domain: Domain
    tenant: str
    namespace: str
    local: str

    @classmethod
    def parse(cls, full: str) -> TopicName:
        """Split ``domain://tenant/namespace/local``.

        Short names (``my-topic``, ``public/default/x``) are refused on purpose: the gateway
        always knows the tenant and namespace, and guessing ``public/default`` would hide bugs.
        """
        domain, sep, rest = full.partition("://")
        if not sep or domain not in _DOMAINS:
            raise ValueError(f"not a full topic name (persistent://tenant/ns/topic): {full!r}")
        tenant, sep1, rest = rest.partition("/")
        namespace, sep2, local = rest.partition("/")
        if not (sep1 and sep2 and tenant and namespace and local):
            raise ValueError(f"topic name needs tenant, namespace and local name: {full!r}")
        return cls(domain, tenant, namespace, local)

    @classmethod
    def of(cls, tenant: str, namespace: str, local: str, *, persistent: bool = True) -> TopicName:
        return cls("persistent" if persistent else "non-persistent", tenant, namespace, local)

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}"

    @property
    def rest_path(self) -> str:
        """``/admin/v2/persistent/<t>/<ns>/<local>`` with every part percent-encoded."""
        return "/admin/v2/" + "/".join(
            (
                self.domain,
                quote_segment(self.tenant),
                quote_segment(self.namespace),
                quote_segment(self.local),
            )
        )


def topic_rest_path(topic: str | TopicName) -> str:
    """The REST path of a topic given as a full name or a parsed :class:`TopicName`."""
    name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
    return name.rest_path


def namespace_rest_path(tenant: str, namespace: str) -> str:
    """``/admin/v2/namespaces/<t>/<ns>`` (policies, create, delete)."""
    return f"/admin/v2/namespaces/{quote_segment(tenant)}/{quote_segment(namespace)}"


def topics_list_rest_path(tenant: str, namespace: str, *, domain: Domain = "persistent") -> str:
    """``/admin/v2/persistent/<t>/<ns>`` (the namespace's topic list)."""
    return f"/admin/v2/{domain}/{quote_segment(tenant)}/{quote_segment(namespace)}"
