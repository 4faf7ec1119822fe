"""Vhosts as RabbitMQ users manage them: add, delete, list (``rabbitmqctl add_vhost`` and the
management API's ``PUT/DELETE /api/vhosts/{name}``), on the Pulsar tenant/namespace each vhost
maps to (``model/vhost.py``).

One module for both the ``starlight-rabbitmq vhosts`` command and the management API, so the
two cannot drift. What a vhost is here:

- it **exists** when its Pulsar namespace exists: that is what Connection.Open checks
  (``PulsarBackend.open_vhost`` answers 530 otherwise);
- **add** creates the tenant when it is missing (allowed on every cluster Pulsar lists, as
  ``pulsar-admin tenants create`` does by default) and the namespace, then opens the
  namespace in the metadata store, which writes its skeleton and the predeclared exchanges
  (as ``rabbit_vhost:add`` declares them);
- **delete** refuses a vhost that still has queues unless forced (RabbitMQ deletes them
  without asking; a Pulsar namespace usually holds data someone cares about, so the
  command asks for ``--force``), then removes the metadata (every replica's view drops the
  queues: their consumers get Basic.Cancel), the Pulsar namespace with its topics, the
  permissions kept for it, and the tenant when the vhost's namespace was its last and it is
  not ``amqpDefaultTenant`` (a tenant the vhost brought along, as ``add`` may have);
- **list** shows the namespaces the gateways' metadata knows that exist in Pulsar, and the
  default vhost ``/`` whenever its namespace exists (RabbitMQ always has ``/``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import trio

from gateway.metadata.permissions import PermissionStore
from gateway.metadata.roles import Views
from gateway.metadata.store import MetadataUnavailable
from gateway.model.vhost import InvalidVhost, Namespace, VhostMapper
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.errors import AdminError, Conflict, NotFound
from gateway.pulsar.names import quote_segment

log = logging.getLogger("gateway.vhosts")

T = TypeVar("T")

__all__ = [
    "VhostAdmin",
    "VhostError",
    "VhostInUse",
    "VhostInfo",
    "VhostInvalid",
    "VhostNotFound",
    "VhostUnavailable",
    "vhost_name",
]

# The metadata of a namespace is deleted in batches; a replica that has it open may re-create
# a leader candidate meanwhile (docs/metadata.md "Leader election"), so a few rounds.
METADATA_DELETE_ATTEMPTS = 5
METADATA_RETRY_DELAY = 0.2


class VhostError(Exception):
    """A refusal; the message is one line for a person."""


class VhostInvalid(VhostError):
    """The name maps to no Pulsar namespace (RabbitMQ would never have it)."""


class VhostNotFound(VhostError):
    pass


class VhostInUse(VhostError):
    """``delete`` without ``force`` of a vhost that has queues."""


class VhostUnavailable(VhostError):
    """Pulsar or ZooKeeper did not do what was asked (unreachable, refused)."""


@dataclass(frozen=True, slots=True)
class VhostInfo:
    """A vhost as listed: the name a client gives, and the namespace it is."""

    name: str
    namespace: Namespace


def vhost_name(mapper: VhostMapper, namespace: Namespace) -> str:
    """The shortest vhost name that maps to ``namespace`` (``VhostMapper.vhost_name``)."""
    return mapper.vhost_name(namespace)


class VhostAdmin:
    """``store`` is the metadata store (a replica's own, or a command's: its namespaces are
    all this lists and opens of it); ``permissions``, when given, loses a deleted vhost's
    entries (RabbitMQ's delete_vhost removes them)."""

    def __init__(
        self,
        admin: PulsarAdmin,
        store: Views,
        mapper: VhostMapper,
        permissions: PermissionStore | None = None,
        *,
        delete_metadata: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self._admin = admin
        self._store = store
        self.mapper = mapper
        self._permissions = permissions
        # ZooKeeperMetadataStore.delete_namespace; not part of MetadataStore (the in-memory
        # store of unit tests has none: its namespaces die with it).
        self._delete_metadata = delete_metadata or getattr(store, "delete_namespace", None)

    def namespace_of(self, vhost: str) -> Namespace:
        try:
            return self.mapper.namespace_for(vhost)
        except InvalidVhost as error:
            raise VhostInvalid(f"invalid vhost name {vhost!r}: {error.reason}") from None

    def name_of(self, namespace: Namespace) -> str:
        return vhost_name(self.mapper, namespace)

    # ------------------------------------------------------------------ reads

    async def exists(self, vhost: str) -> Namespace | None:
        """The vhost's namespace when it exists in Pulsar, else None."""
        namespace = self.namespace_of(vhost)
        found = await self._pulsar(
            self._admin.namespace_exists(namespace.tenant, namespace.namespace),
            f"check vhost {vhost!r}",
        )
        return namespace if found else None

    async def list(self) -> list[VhostInfo]:
        """Every vhost, sorted by name."""
        try:
            stored = await self._store.list_namespaces()
        except MetadataUnavailable as error:
            raise VhostUnavailable(f"cannot list the vhosts: {error}") from None
        candidates = {Namespace.parse(text) for text in stored if _parses(text)}
        candidates.add(Namespace(self.mapper.default_tenant, self.mapper.default_namespace))
        by_tenant: dict[str, set[Namespace]] = {}
        for namespace in candidates:
            by_tenant.setdefault(namespace.tenant, set()).add(namespace)
        found: list[VhostInfo] = []
        for tenant, members in by_tenant.items():
            try:
                existing = set(
                    await self._pulsar(self._admin.list_namespaces(tenant), "list the vhosts")
                )
            except VhostNotFound:
                continue  # the tenant is gone, and its namespaces with it
            found.extend(
                VhostInfo(self.name_of(namespace), namespace)
                for namespace in members
                if str(namespace) in existing
            )
        return sorted(found, key=lambda info: info.name)

    async def queue_count(self, namespace: Namespace) -> int:
        """The queues the metadata holds in ``namespace`` (0 when it has no metadata)."""
        key = str(namespace)
        try:
            if key not in await self._store.list_namespaces():
                return 0
            view = await self._store.open(key)
        except MetadataUnavailable as error:
            raise VhostUnavailable(f"cannot count the queues of {key}: {error}") from None
        return len(view.queues)

    # ------------------------------------------------------------------ writes

    async def add(self, vhost: str) -> bool:
        """Create the vhost; False when it existed already (nothing changed)."""
        namespace = self.namespace_of(vhost)
        what = f"create vhost {vhost!r} ({namespace})"
        created = False
        if not await self._pulsar(self._admin.tenant_exists(namespace.tenant), what):
            await self._create_tenant(namespace.tenant, what)
        try:
            created = await self._pulsar(
                self._admin.create_namespace(namespace.tenant, namespace.namespace), what
            )
        except VhostNotFound:  # the tenant went away between the two calls
            raise VhostUnavailable(
                f"cannot {what}: tenant {namespace.tenant} was deleted meanwhile"
            ) from None
        try:
            await self._store.open(str(namespace))
        except MetadataUnavailable as error:
            raise VhostUnavailable(f"cannot {what}: {error}") from None
        if created:
            log.info("vhost %s created: Pulsar namespace %s", vhost, namespace)
        return created

    async def delete(self, vhost: str, *, force: bool = False) -> None:
        """Delete the vhost with everything in it; ``VhostInUse`` when it has queues and
        ``force`` is false, ``VhostNotFound`` when it does not exist."""
        namespace = await self.exists(vhost)
        if namespace is None:
            raise VhostNotFound(f"vhost {vhost!r} does not exist")
        queues = await self.queue_count(namespace)
        if queues and not force:
            raise VhostInUse(
                f"vhost {vhost!r} ({namespace}) has {queues} queue(s): delete them first, "
                "or force the deletion (it deletes their messages too)"
            )
        await self._forget_metadata(str(namespace))
        what = f"delete vhost {vhost!r} ({namespace})"
        await self._pulsar(
            self._admin.delete_namespace(namespace.tenant, namespace.namespace, force=True), what
        )
        await self._forget_permissions(str(namespace))
        if namespace.tenant != self.mapper.default_tenant:
            await self._delete_tenant_if_empty(namespace.tenant)
        log.info("vhost %s deleted: Pulsar namespace %s (%d queue(s))", vhost, namespace, queues)

    # ------------------------------------------------------------------ parts

    async def _create_tenant(self, tenant: str, what: str) -> None:
        clusters = await self._pulsar(self._admin.request("GET", "/admin/v2/clusters"), what)
        body = {"adminRoles": [], "allowedClusters": list(clusters.json())}
        try:
            await self._pulsar(
                self._admin.request("PUT", f"/admin/v2/tenants/{quote_segment(tenant)}", body=body),
                what,
            )
        except VhostUnavailable as error:
            if not isinstance(error.__cause__, Conflict):
                raise  # 409: created meanwhile, which is all we wanted

    async def _delete_tenant_if_empty(self, tenant: str) -> None:
        what = f"delete tenant {tenant}"
        try:
            if await self._pulsar(self._admin.list_namespaces(tenant), what):
                return
            await self._pulsar(
                self._admin.request("DELETE", f"/admin/v2/tenants/{quote_segment(tenant)}"), what
            )
        except VhostError as error:
            # The vhost is gone; a tenant left behind costs nothing and is said once.
            log.warning("vhost deleted, but its tenant stays: %s", error)

    async def _forget_metadata(self, namespace: str) -> None:
        if self._delete_metadata is None:
            return
        for attempt in range(1, METADATA_DELETE_ATTEMPTS + 1):
            try:
                await self._delete_metadata(namespace)
                return
            except MetadataUnavailable as error:
                if attempt == METADATA_DELETE_ATTEMPTS:
                    raise VhostUnavailable(
                        f"cannot delete the metadata of {namespace}: {error}"
                    ) from None
                await trio.sleep(METADATA_RETRY_DELAY * attempt)

    async def _forget_permissions(self, namespace: str) -> None:
        if self._permissions is None:
            return
        try:
            for entry in await self._permissions.list(namespace):
                await self._permissions.clear(namespace, entry.principal)
        except MetadataUnavailable as error:
            log.warning("vhost %s deleted, but not its permissions: %s", namespace, error)

    @staticmethod
    async def _pulsar(call: Awaitable[T], what: str) -> T:
        """``call``'s answer; Pulsar's refusals as VhostError (404 as VhostNotFound)."""
        try:
            return await call
        except NotFound as error:
            raise VhostNotFound(f"cannot {what}: {error}") from error
        except AdminError as error:
            raise VhostUnavailable(f"cannot {what}: {error}") from error


def _parses(text: str) -> bool:
    try:
        Namespace.parse(text)
    except ValueError:
        return False
    return True
