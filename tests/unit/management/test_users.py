"""gateway/management/users.py: HTTP basic logins through the gateway's authenticator, and
RabbitMQ's user tags from the configuration."""

from __future__ import annotations

import base64

import pytest

from gateway.auth.authenticator import AcceptAnyone, AuthenticationFailed, PeerIdentity
from gateway.management.errors import ApiError
from gateway.management.users import User, Users
from gateway.metadata.permissions import MemoryPermissionStore
from gateway.model.vhost import Namespace


class OnlyAlice:
    async def authenticate(self, mechanism: str, response: bytes, peer: PeerIdentity) -> str:
        assert mechanism == "PLAIN"
        if response != b"\0alice\0secret":
            raise AuthenticationFailed("no")
        return "alice"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def users(authorization: bool = True, authenticator: object = None) -> Users:
    return Users(
        authenticator or AcceptAnyone(),  # type: ignore[arg-type]
        MemoryPermissionStore(),
        superusers=["root"],
        monitors=["watcher"],
        authorization=authorization,
    )


async def test_credentials_go_through_the_authenticator_as_plain() -> None:
    checked = users(authenticator=OnlyAlice())
    assert await checked.login(basic("alice", "secret"), "1.2.3.4:5") == User(
        "alice", ("management",)
    )
    for header in (basic("alice", "wrong"), "Basic !!!", "Bearer x", basic("a", "b")[:10]):
        with pytest.raises(ApiError) as caught:
            await checked.login(header, "peer")
        assert (caught.value.status, caught.value.error) == (401, "not_authorized")
    with pytest.raises(ApiError) as missing:
        await checked.login(None, "peer")
    assert (missing.value.status, missing.value.error) == (401, "")  # the bare challenge


def test_tags() -> None:
    assert users().tags_of("root") == ("administrator",)
    assert users().tags_of("watcher") == ("monitoring",)
    assert users().tags_of("app") == ("management",)
    # Without authorization everyone may do everything on AMQP: here too.
    assert users(authorization=False).tags_of("app") == ("administrator",)
    assert users(authorization=False).tags_of("watcher") == ("monitoring",)


async def test_vhost_access_is_an_entry_in_the_vhost() -> None:
    checked = users()
    namespace = Namespace("public", "default")
    app = User("app", ("management",))
    assert not checked.may_use(app, namespace)
    assert checked.may_see(User("watcher", ("monitoring",)), namespace)
    await checked.permissions.set("public/default", "app", "", "", "")
    assert checked.may_use(app, namespace)
    assert checked.may_use(User("root", ("administrator",)), Namespace("t", "n"))
