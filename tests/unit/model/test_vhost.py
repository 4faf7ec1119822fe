"""Vhost → Pulsar namespace (reference/001 "Multi-tenancy and VHosts", reference/002)."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.errors import ConnectionException, ReplyCode
from gateway.model.vhost import InvalidVhost, Namespace, VhostMapper, pulsar_name_problem

DEFAULT = VhostMapper()
SHORT_TO_TENANT = VhostMapper(map_short_vhost_to_tenant=True)

# Every example the reference gives, with the configuration it assumes.
REFERENCE_EXAMPLES = [
    # reference/000: "/" → public/default; "/<tenant>" or "<tenant>" → public/<tenant>;
    # "/<tenant>/<namespace>" or "<tenant>/<namespace>" → <tenant>/<namespace>.
    (DEFAULT, "/", "public/default"),
    (DEFAULT, "/tenant", "public/tenant"),
    (DEFAULT, "tenant", "public/tenant"),
    (DEFAULT, "/tenant/namespace", "tenant/namespace"),
    (DEFAULT, "tenant/namespace", "tenant/namespace"),
    # reference/001: "/vhost1/abc" → vhost1/abc; "/vhost1" and "vhost1" → public/vhost1, or
    # vhost1/default with amqpMapShortVhostToTenant=true.
    (DEFAULT, "/vhost1/abc", "vhost1/abc"),
    (DEFAULT, "/vhost1", "public/vhost1"),
    (DEFAULT, "vhost1", "public/vhost1"),
    (SHORT_TO_TENANT, "/vhost1", "vhost1/default"),
    (SHORT_TO_TENANT, "vhost1", "vhost1/default"),
    (SHORT_TO_TENANT, "/", "public/default"),
    (SHORT_TO_TENANT, "/vhost1/abc", "vhost1/abc"),
    # "/HOSTNAME/HOSTNAME_SUFFIX or HOSTNAME/HOSTNAME_SUFFIX maps directly".
    (DEFAULT, "/HOSTNAME/HOSTNAME_SUFFIX", "HOSTNAME/HOSTNAME_SUFFIX"),
    (DEFAULT, "HOSTNAME/HOSTNAME_SUFFIX", "HOSTNAME/HOSTNAME_SUFFIX"),
    # Other defaults.
    (VhostMapper("acme", "main"), "/", "acme/main"),
    (VhostMapper("acme", "main"), "/x", "acme/x"),
    (VhostMapper("acme", "main", True), "x", "x/main"),
    # The reference treats an empty name like "/" (it strips one "/" and checks for empty).
    (DEFAULT, "", "public/default"),
    # Every character Pulsar allows: a-zA-Z0-9_-=:.
    (DEFAULT, "/a-b_c=d:e.f/Z9", "a-b_c=d:e.f/Z9"),
]


@pytest.mark.parametrize(("mapper", "vhost", "expected"), REFERENCE_EXAMPLES)
def test_reference_examples(mapper: VhostMapper, vhost: str, expected: str) -> None:
    assert str(mapper.namespace_for(vhost)) == expected


@pytest.mark.parametrize(
    ("vhost", "why"),
    [
        ("//", "empty segment"),
        ("/a/", "empty segment"),
        ("a//b", "3 segments"),
        ("/a/b/", "3 segments"),
        ("/a/b/c", "3 segments"),
        ("a/b/c/d", "4 segments"),
        ("/a b", "' '"),
        ("/caf\u00e9", "'\u00e9'"),
        ("/a%2Fb", "'%'"),
        ("/t/n#1", "'#'"),
        ("/.", "'.' is not usable"),
        ("/t/..", "'..' is not usable"),
    ],
)
def test_invalid_vhosts_are_530_naming_the_vhost(vhost: str, why: str) -> None:
    with pytest.raises(InvalidVhost) as caught:
        DEFAULT.namespace_for(vhost)
    error = caught.value
    assert isinstance(error, ConnectionException)
    assert error.reply_code == ReplyCode.NOT_ALLOWED == 530
    assert error.is_hard
    assert error.reply_text.startswith(f"NOT_ALLOWED - vhost {vhost} not found: ")
    assert why in error.reply_text
    assert (error.class_id, error.method_id) == (10, 40)  # Connection.Open
    assert error.vhost == vhost


def test_mapper_refuses_invalid_defaults() -> None:
    with pytest.raises(ValueError, match="default_tenant"):
        VhostMapper(default_tenant="a/b")
    with pytest.raises(ValueError, match="default_namespace"):
        VhostMapper(default_namespace="")


def test_namespace_parse_and_str() -> None:
    assert Namespace.parse("t/n") == Namespace("t", "n")
    assert str(Namespace("t", "n")) == "t/n"
    for bad in ("t", "t/n/x", "/n", "t/", "t/n n"):
        with pytest.raises(ValueError):
            Namespace.parse(bad)


# ------------------------------------------------------------------------------ properties

PULSAR_CHARS = string.ascii_letters + string.digits + "_-=:."
# NamedEntity's rule, written independently of the module under test.
PULSAR_NAME = re.compile(r"[-=:.\w]+", re.ASCII)
segments = st.text(PULSAR_CHARS, min_size=1, max_size=60).filter(lambda s: s not in (".", ".."))


@given(
    tenant=segments,
    namespace=segments,
    slash=st.booleans(),
    short_to_tenant=st.booleans(),
)
def test_every_valid_vhost_maps(
    tenant: str, namespace: str, slash: bool, short_to_tenant: bool
) -> None:
    mapper = VhostMapper(map_short_vhost_to_tenant=short_to_tenant)
    prefix = "/" if slash else ""
    assert mapper.namespace_for(f"{prefix}{tenant}/{namespace}") == Namespace(tenant, namespace)
    short = mapper.namespace_for(f"{prefix}{tenant}")
    if short_to_tenant:
        assert short == Namespace(tenant, "default")
    else:
        assert short == Namespace("public", tenant)


@given(st.text(max_size=80) | st.text("/a._%", max_size=12))
def test_any_vhost_maps_to_a_legal_namespace_or_is_refused(vhost: str) -> None:
    try:
        namespace = DEFAULT.namespace_for(vhost)
    except InvalidVhost as error:
        assert error.reply_code == 530
        assert vhost[:20] in error.reply_text or len(error.reply_text.encode()) == 255
        return
    for part in (namespace.tenant, namespace.namespace):
        assert PULSAR_NAME.fullmatch(part)
        assert part not in (".", "..")
    # The mapping is the reference's: the namespace is recoverable from the vhost's segments.
    rest = vhost[1:] if vhost.startswith("/") else vhost
    if rest:
        assert rest in (namespace.namespace, f"{namespace.tenant}/{namespace.namespace}")


@given(st.text(max_size=40))
def test_pulsar_name_problem_agrees_with_named_entity(name: str) -> None:
    legal = bool(PULSAR_NAME.fullmatch(name)) and name not in (".", "..")
    assert (pulsar_name_problem(name) is None) == legal


@pytest.mark.parametrize("short_to_tenant", [False, True])
@pytest.mark.parametrize(
    "vhost", ["/", "", "orders", "/orders", "public/orders", "/acme/default", "acme/x", "x/default"]
)
def test_the_canonical_name_is_the_shortest_alias_of_the_same_namespace(
    vhost: str, short_to_tenant: bool
) -> None:
    mapper = VhostMapper(map_short_vhost_to_tenant=short_to_tenant)
    name = mapper.canonical(vhost)
    assert mapper.namespace_for(name) == mapper.namespace_for(vhost)
    assert mapper.canonical(name) == name
    assert len(name) <= len(vhost) or vhost == ""


def test_canonical_names() -> None:
    mapper = VhostMapper()
    assert [mapper.canonical(v) for v in ("", "/", "/orders", "public/orders", "acme/x")] == [
        "/",
        "/",
        "orders",
        "orders",
        "acme/x",
    ]
    assert mapper.canonical("a b") == "a b"  # no namespace: left as it is
    tenants = VhostMapper(map_short_vhost_to_tenant=True)
    assert tenants.canonical("/acme/default") == "acme"
    assert tenants.canonical("public/default") == "/"
