"""Who is asking, and what RabbitMQ's user tags let them do.

HTTP basic credentials go through the gateway's own authenticator as a SASL PLAIN response,
exactly as an AMQP client's would: with ``authenticationEnabled=false`` anyone is let in under
the name they give, with it the password is a JWT whose claim is the principal
(docs/security.md). The gateway has no user database, so a principal's tags come from the
configuration:

- ``administrator``: the principals of ``superUserRoles``, and everyone when
  ``authorizationEnabled=false`` (on AMQP they may already do everything, everywhere);
- ``monitoring``: the principals of ``managementMonitoringRoles``;
- ``management``: everyone else: they see and use the vhosts they have permissions in.

What each tag may do is RabbitMQ's (``rabbit_web_dispatch_access_control``): administrators
everything; monitoring users every vhost's listing, every connection and the nodes; management
users only what their permissions reach. Refusals are RabbitMQ's 401 bodies.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Collection
from dataclasses import dataclass

from gateway.auth.authenticator import AuthenticationFailed, Authenticator, PeerIdentity
from gateway.management.errors import ApiError, not_authenticated, not_authorised
from gateway.metadata.permissions import PermissionStore
from gateway.model.vhost import Namespace

__all__ = ["User", "Users"]

ADMINISTRATOR = "administrator"
MONITORING = "monitoring"
MANAGEMENT = "management"


@dataclass(frozen=True, slots=True)
class User:
    name: str
    tags: tuple[str, ...]

    @property
    def is_admin(self) -> bool:
        return ADMINISTRATOR in self.tags

    @property
    def is_monitor(self) -> bool:
        return self.is_admin or MONITORING in self.tags


class Users:
    def __init__(
        self,
        authenticator: Authenticator,
        permissions: PermissionStore,
        *,
        superusers: Collection[str],
        monitors: Collection[str],
        authorization: bool,
    ) -> None:
        self._authenticator = authenticator
        self.permissions = permissions
        self._superusers = frozenset(superusers)
        self._monitors = frozenset(monitors)
        self._authorization = authorization

    def named(self) -> frozenset[str]:
        """The principals the configuration gives tags to."""
        return self._superusers | self._monitors

    def tags_of(self, name: str) -> tuple[str, ...]:
        if name in self._superusers:
            return (ADMINISTRATOR,)
        if name in self._monitors:
            return (MONITORING,)
        if not self._authorization:
            return (ADMINISTRATOR,)
        return (MANAGEMENT,)

    async def login(self, authorization: str | None, peer: str) -> User:
        """The user of an ``Authorization: Basic ...`` header; 401 otherwise."""
        if not authorization:
            # No credentials: cowboy's 401 with the challenge and no body.
            raise ApiError(401, "", "", ()) from None
        scheme, _, encoded = authorization.partition(" ")
        if scheme.lower() != "basic":
            raise not_authenticated()
        try:
            name, colon, password = (
                base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
            )
        except (binascii.Error, UnicodeDecodeError):
            raise not_authenticated() from None
        if not colon:
            raise not_authenticated()
        response = b"\0" + name.encode() + b"\0" + password.encode()
        try:
            principal = await self._authenticator.authenticate(
                "PLAIN", response, PeerIdentity(address=peer)
            )
        except AuthenticationFailed:
            raise not_authenticated() from None
        return User(principal, self.tags_of(principal))

    # ------------------------------------------------------------------ what a user may do

    def may_use(self, user: User, namespace: Namespace) -> bool:
        """RabbitMQ's ``user_matches_vhost``: an entry in the vhost, whatever it says."""
        return user.is_admin or self.permissions.lookup(str(namespace), user.name) is not None

    def may_see(self, user: User, namespace: Namespace) -> bool:
        """``/api/vhosts``: monitoring users see every vhost too."""
        return user.is_monitor or self.may_use(user, namespace)

    def require_use(self, user: User, namespace: Namespace) -> None:
        if not self.may_use(user, namespace):
            raise not_authorised("User not authorised to access virtual host")


def require_admin(user: User) -> None:
    if not user.is_admin:
        raise not_authorised("Not administrator user")


def require_monitor(user: User) -> None:
    if not user.is_monitor:
        raise not_authorised("Not monitor user")
