"""gateway/backend/vhost_admin.py: the names vhosts are listed under, and the rules of add and
delete, over a fake Pulsar admin API and the in-memory metadata store (the real stack:
tests/integration/test_vhosts_cli.py and the management API's tests)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.backend.vhost_admin import (
    VhostAdmin,
    VhostInUse,
    VhostInvalid,
    VhostNotFound,
    VhostUnavailable,
    vhost_name,
)
from gateway.metadata.memory import MemoryMetadataStore
from gateway.metadata.permissions import MemoryPermissionStore
from gateway.model.entities import Queue
from gateway.model.vhost import Namespace, VhostMapper
from gateway.pulsar.errors import NotFound, Unavailable

NAMES = st.from_regex(r"[a-zA-Z0-9_=:-][-=:.a-zA-Z0-9_]{0,8}", fullmatch=True)


@given(
    tenant=NAMES,
    namespace=NAMES,
    short_to_tenant=st.booleans(),
    default_tenant=st.sampled_from(["public", "t"]),
)
def test_the_listed_name_maps_back_to_its_namespace(
    tenant: str, namespace: str, short_to_tenant: bool, default_tenant: str
) -> None:
    mapper = VhostMapper(default_tenant, "default", short_to_tenant)
    name = vhost_name(mapper, Namespace(tenant, namespace))
    assert mapper.namespace_for(name) == Namespace(tenant, namespace)


@pytest.mark.parametrize(
    ("short_to_tenant", "namespace", "name"),
    [
        (False, Namespace("public", "default"), "/"),
        (False, Namespace("public", "orders"), "orders"),
        (False, Namespace("acme", "orders"), "acme/orders"),
        (True, Namespace("acme", "default"), "acme"),
        (True, Namespace("public", "orders"), "public/orders"),
    ],
)
def test_the_shortest_name_is_listed(
    short_to_tenant: bool, namespace: Namespace, name: str
) -> None:
    assert vhost_name(VhostMapper("public", "default", short_to_tenant), namespace) == name


class FakeAdmin:
    """The calls VhostAdmin makes of PulsarAdmin, on a dict of tenants."""

    def __init__(self) -> None:
        self.tenants: dict[str, set[str]] = {"public": {"public/default"}}
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise Unavailable(None, "GET", "/admin/v2", "connection refused")

    async def namespace_exists(self, tenant: str, namespace: str) -> bool:
        self._check()
        return f"{tenant}/{namespace}" in self.tenants.get(tenant, set())

    async def tenant_exists(self, tenant: str) -> bool:
        self._check()
        return tenant in self.tenants

    async def list_namespaces(self, tenant: str) -> list[str]:
        self._check()
        if tenant not in self.tenants:
            raise NotFound(404, "GET", f"/admin/v2/namespaces/{tenant}", "Tenant does not exist")
        return sorted(self.tenants[tenant])

    async def create_namespace(self, tenant: str, namespace: str) -> bool:
        self._check()
        if tenant not in self.tenants:
            raise NotFound(404, "PUT", "/admin/v2/namespaces", "Tenant does not exist")
        found = f"{tenant}/{namespace}" in self.tenants[tenant]
        self.tenants[tenant].add(f"{tenant}/{namespace}")
        return not found

    async def delete_namespace(self, tenant: str, namespace: str, *, force: bool = False) -> bool:
        self._check()
        members = self.tenants.get(tenant, set())
        found = f"{tenant}/{namespace}" in members
        members.discard(f"{tenant}/{namespace}")
        return found

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        self._check()
        if path == "/admin/v2/clusters":
            return SimpleNamespace(json=lambda: ["standalone"])
        tenant = path.rsplit("/", 1)[1]
        if method == "PUT":
            assert kwargs["body"] == {"adminRoles": [], "allowedClusters": ["standalone"]}
            self.tenants.setdefault(tenant, set())
        else:
            del self.tenants[tenant]
        return SimpleNamespace(json=lambda: None)


def admin_of(pulsar: FakeAdmin, store: MemoryMetadataStore, **kwargs: Any) -> VhostAdmin:
    return VhostAdmin(pulsar, store, VhostMapper(), **kwargs)  # type: ignore[arg-type]


async def test_add_creates_the_tenant_and_namespace_and_opens_the_metadata() -> None:
    pulsar, store = FakeAdmin(), MemoryMetadataStore()
    vhosts = admin_of(pulsar, store)
    assert await vhosts.add("acme/orders") is True
    assert pulsar.tenants["acme"] == {"acme/orders"}
    assert "acme/orders" in await store.list_namespaces()
    assert await vhosts.add("/acme/orders") is False  # the same vhost: nothing to do
    assert [info.name for info in await vhosts.list()] == ["/", "acme/orders"]


async def test_delete_refuses_a_vhost_with_queues_unless_forced() -> None:
    pulsar, store = FakeAdmin(), MemoryMetadataStore()
    forgotten: list[str] = []

    async def forget(namespace: str) -> None:
        forgotten.append(namespace)

    permissions = MemoryPermissionStore()
    await permissions.set("acme/orders", "app", ".*", ".*", ".*")
    vhosts = admin_of(pulsar, store, permissions=permissions, delete_metadata=forget)
    await vhosts.add("acme/orders")
    await store.create_queue("acme/orders", Queue("work", durable=True))
    with pytest.raises(VhostInUse, match=r"has 1 queue\(s\)"):
        await vhosts.delete("acme/orders")
    assert pulsar.tenants["acme"] == {"acme/orders"}
    assert forgotten == []
    await vhosts.delete("acme/orders", force=True)
    assert forgotten == ["acme/orders"]
    assert "acme" not in pulsar.tenants  # came with the vhost, went with it
    assert permissions.lookup("acme/orders", "app") is None
    with pytest.raises(VhostNotFound, match="does not exist"):
        await vhosts.delete("acme/orders")


async def test_the_default_tenant_stays_when_its_vhost_goes() -> None:
    pulsar, store = FakeAdmin(), MemoryMetadataStore()
    vhosts = admin_of(pulsar, store, delete_metadata=lambda _ns: _none())
    await vhosts.add("orders")
    await vhosts.delete("orders")
    assert pulsar.tenants == {"public": {"public/default"}}


async def _none() -> None:
    return None


async def test_refusals_are_vhost_errors() -> None:
    pulsar, store = FakeAdmin(), MemoryMetadataStore()
    vhosts = admin_of(pulsar, store)
    with pytest.raises(VhostInvalid, match=r"invalid vhost name 'a b'"):
        await vhosts.add("a b")
    pulsar.down = True
    with pytest.raises(VhostUnavailable, match=r"cannot create vhost 'x' \(public/x\)"):
        await vhosts.add("x")
    with pytest.raises(VhostUnavailable, match="cannot list the vhosts"):
        await vhosts.list()
