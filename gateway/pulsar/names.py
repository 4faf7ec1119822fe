"""Full Pulsar topic names, split into parts and turned into admin REST paths.

A full name is ``persistent://tenant/namespace/local``. Pulsar 4.0.8 accepts almost any
character in the local part, through the REST API and the binary protocol alike (measured; see
docs/pulsar-layer.md), except:

* ``/``: ``persistent://t/ns/a/b`` is Pulsar's legacy four-part form (tenant ``t``, cluster
  ``ns``, namespace ``a``, topic ``b``): another namespace altogether, whose leftover metadata
  then blocks deleting ``t/ns``;
* NUL: the web server answers 400, so such a topic (which the binary protocol creates happily)
  can never be deleted through the admin API;
* a blank name (only whitespace): 412 "Topic name is not valid";
* exactly ``.`` or ``..``: HTTP path normalisation eats them, so the admin API cannot address
  them;

and a name ending in ``-partition-<digits>`` is reserved for the partitions of partitioned
topics (412 on creation); it stays parseable because partitions are addressed that way.

:meth:`TopicName.parse` refuses all of these, so a bad encoding fails loudly here instead of
creating topics nobody can clean up. Tenant and namespace names are much stricter:
``[-=:.A-Za-z0-9_]+`` (:func:`is_valid_namespace_part`).

The admin REST API takes each part as one URL path segment. The broker decodes segments with
Java's ``URLDecoder`` (``Codec.decode``), which turns ``+`` into a space, so every character
outside the RFC 3986 unreserved set is percent-encoded here, ``+``, ``/`` and ``%`` included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

Domain = Literal["persistent", "non-persistent"]
_DOMAINS: tuple[Domain, ...] = ("persistent", "non-persistent")
# Pulsar's NamedEntity rule for tenants, namespaces (and clusters); \w is ASCII-only in Java.
_NAMESPACE_PART = re.compile(r"[-=:.\w]+", re.ASCII)


def is_valid_namespace_part(name: str) -> bool:
    """Whether Pulsar accepts ``name`` as a tenant or namespace name."""
    return name not in (".", "..") and _NAMESPACE_PART.fullmatch(name) is not None


def local_name_problem(local: str) -> str | None:
    """Why Pulsar (or its admin API) cannot take ``local`` as a topic's local name, or None."""
    if not local or not local.strip():
        return "blank local name"
    if "/" in local:
        return "'/' makes it a legacy tenant/cluster/namespace/topic name"
    if "\x00" in local:
        return "NUL cannot be sent to the admin API"
    if local in (".", ".."):
        return "'.' and '..' are eaten by HTTP path normalisation"
    return None


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
        problem = local_name_problem(local)
        if problem:
            raise ValueError(f"{problem}: {full!r}")
        return cls(domain, tenant, namespace, local)

    @classmethod
    def of(cls, tenant: str, namespace: str, local: str, *, persistent: bool = True) -> TopicName:
        domain = "persistent" if persistent else "non-persistent"
        return cls.parse(f"{domain}://{tenant}/{namespace}/{local}")

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
