"""Who may do what through the management API: HTTP basic credentials checked by the
gateway's own authenticator (the password is a JWT, as for an AMQP PLAIN login), RabbitMQ's
user tags from the configuration (superUserRoles: administrator, managementMonitoringRoles:
monitoring, everyone else: management), permissions from the permission store, and
RabbitMQ's 401 bodies for every refusal."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest

from tests.support.managed_fleet import Managed, ManagedFleet, managed_fleet
from tests.support.pki import token_keys

pytestmark = pytest.mark.timeout(180)

KEYS = token_keys()


def token(subject: str) -> str:
    return jwt.encode({"sub": subject}, KEYS.secret, algorithm="HS256")


def secured_config() -> str:
    secret = base64.b64encode(KEYS.secret).decode()
    return (
        "authenticationEnabled=true\n"
        "authorizationEnabled=true\n"
        f"tokenSecretKey=data:;base64,{secret}\n"
        "superUserRoles=admin\n"
        "managementMonitoringRoles=mon\n"
    )


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pulsar_stack: Any) -> Iterator[Managed]:
    tmp = tmp_path_factory.mktemp("secured")
    with managed_fleet(tmp, pulsar_stack, secured_config()) as fleet:
        yield ManagedFleet.start(fleet, "secured-1")


def client(gateway: Managed, user: str, password: str | None = None) -> httpx.Client:
    return gateway.client((user, token(user) if password is None else password))


NOT_VHOST = {"error": "not_authorised", "reason": "User not authorised to access virtual host"}
NOT_ADMIN = {"error": "not_authorised", "reason": "Not administrator user"}


def test_a_bad_token_is_refused_as_rabbitmq_refuses_a_bad_password(secured: Managed) -> None:
    with client(secured, "admin", "not-a-jwt") as api:
        response = api.get("/api/whoami")
    assert response.status_code == 401
    assert response.json() == {"error": "not_authorized", "reason": "Not_Authorized"}


def test_tags_come_from_the_configuration(secured: Managed) -> None:
    for user, tags in (
        ("admin", ["administrator"]),
        ("mon", ["monitoring"]),
        ("app", ["management"]),
    ):
        with client(secured, user) as api:
            assert api.get("/api/whoami").json() == {"name": user, "tags": tags}


def test_a_monitoring_user_sees_everything_and_changes_nothing(secured: Managed) -> None:
    with client(secured, "admin") as api:
        assert api.put("/api/queues/%2F/watched", json={}).status_code == 201
    with client(secured, "mon") as api:
        assert api.get("/api/nodes").status_code == 200
        assert [v["name"] for v in api.get("/api/vhosts").json()] == ["/"]
        deleted = api.delete("/api/queues/%2F/watched")
        assert (deleted.status_code, deleted.json()) == (401, NOT_VHOST)
        created = api.put("/api/vhosts/elsewhere")
        assert (created.status_code, created.json()) == (401, NOT_ADMIN)
        exported = api.get("/api/definitions")
        assert (exported.status_code, exported.json()) == (401, NOT_ADMIN)


def test_a_management_user_acts_within_its_permissions(secured: Managed) -> None:
    with client(secured, "app") as api:
        assert api.get("/api/queues").json() == []  # no permissions: no vhost to see
        shown = api.get("/api/queues/%2F/watched")
        assert (shown.status_code, shown.json()) == (401, NOT_VHOST)
        nodes = api.get("/api/nodes")
        assert nodes.json() == {"error": "not_authorised", "reason": "Not monitor user"}
        assert api.get("/api/vhosts").json() == []
    with client(secured, "admin") as api:
        patterns = {"configure": "^app-", "write": "^app-", "read": "^app-"}
        assert api.put("/api/permissions/%2F/app", json=patterns).status_code == 201
    with client(secured, "app") as api:
        assert api.put("/api/queues/%2F/app-work", json={"durable": True}).status_code == 201
        refused = api.put("/api/queues/%2F/not-mine", json={})
        assert (refused.status_code, refused.json()) == (
            401,
            {"error": "not_authorised", "reason": "Access refused."},
        )
        names = [q["name"] for q in api.get("/api/queues/%2F").json()]
        assert "app-work" in names
        assert api.delete("/api/queues/%2F/app-work").status_code == 204
        granted = api.get("/api/permissions")
        assert (granted.status_code, granted.json()) == (401, NOT_ADMIN)
