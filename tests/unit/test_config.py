"""gateway/config/: defaults against the reference, the file format, the environment,
every kind of bad input (always a one-line ConfigError), and the generated documents."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import typing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gateway.config.loading
from gateway.config import (
    ENV_PREFIX,
    ConfigError,
    ConfigKey,
    GatewayConfig,
    Kind,
    Listener,
    MetricsListener,
    Section,
    config_from_text,
    describe_keys,
    load_config,
    render_example_conf,
    render_markdown_table,
)

REPO = Path(__file__).resolve().parents[2]
TABLE_COMMAND = ".venv/bin/python scripts/config_table.py --write"
TABLE_PAGE = REPO / "docs" / "configuration.md"

REQUIRED = object()

# Written by hand from the tables of reference/002 and reference/001 (plus advertisedAddress from
# 002's examples): key -> (default as it would be written in the file, parsed default value).
# A blank default in the reference is "" (or false for the booleans, PKCS12 for store types).
REFERENCE_KEYS: dict[str, tuple[object, object]] = {
    # General and AMQP
    "configurationStoreServers": (REQUIRED, None),
    "amqpListeners": ("amqp://127.0.0.1:5672", (Listener("amqp", "127.0.0.1", 5672),)),
    "advertisedAddress": ("", ""),
    "amqpSessionCountLimit": ("256", 256),
    "amqpHeartbeatDelay": ("0", 0),
    "amqpHeartbeatTimeoutFactor": ("2", 2),
    "amqpNetworkBufferSize": ("2097152", 2097152),
    "amqpMaxMessageSize": ("104857600", 104857600),
    "amqpDebugBinaryDataLength": ("80", 80),
    "amqpConnectionCloseTimeout": ("2000", 2000),
    "amqpBatchingEnabled": ("true", True),
    # Authentication
    "authenticationEnabled": ("false", False),
    "amqpAuthenticationMechanisms": ("PLAIN", ("PLAIN",)),
    "tokenSecretKey": ("", ""),
    "tokenPublicKey": ("", ""),
    "tokenAuthClaim": ("", ""),
    "tokenAudienceClaim": ("", ""),
    "tokenAudience": ("", ""),
    # Broker client
    "brokerServiceURL": (REQUIRED, None),
    "brokerWebServiceURL": (REQUIRED, None),
    "brokerClientAuthenticationPlugin": ("", ""),
    "brokerClientAuthenticationParameters": ("", ""),
    "amqpBrokerClientAuthenticationParameters": ("", ""),
    "tlsEnabledWithBroker": ("false", False),
    "brokerClientTrustCertsFilePath": ("", ""),
    "brokerClientTlsEnabledWithKeyStore": ("false", False),
    "brokerClientTlsTrustStoreType": ("PKCS12", "PKCS12"),
    "brokerClientTlsTrustStore": ("", ""),
    "brokerClientTlsTrustStorePassword": ("", ""),
    # TLS
    "tlsCertRefreshCheckDurationSec": ("300", 300),
    "tlsCertificateFilePath": ("", ""),
    "tlsKeyFilePath": ("", ""),
    "tlsTrustCertsFilePath": ("", ""),
    "tlsAllowInsecureConnection": ("false", False),
    "tlsHostnameVerificationEnabled": ("false", False),
    "tlsRequireTrustedClientCertOnConnect": ("false", False),
    "tlsProtocols": ("", ()),
    "tlsCiphers": ("", ()),
    "tlsEnabledWithKeyStore": ("false", False),
    "tlsProvider": ("", ""),
    "tlsKeyStoreType": ("PKCS12", "PKCS12"),
    "tlsKeyStore": ("", ""),
    "tlsKeyStorePassword": ("", ""),
    "tlsTrustStoreType": ("PKCS12", "PKCS12"),
    "tlsTrustStore": ("", ""),
    "tlsTrustStorePassword": ("", ""),
    # Vhost mapping (reference/001)
    "amqpDefaultTenant": ("public", "public"),
    "amqpDefaultNamespace": ("default", "default"),
    "amqpMapShortVhostToTenant": ("false", False),
}

# The keys this gateway adds (docs/configuration.md, "Gateway-specific keys").
GATEWAY_KEYS: dict[str, tuple[object, object]] = {
    "rollupWindowSeconds": ("60,3600", (60, 3600)),
    "rollupWatermarkSeconds": ("120", 120),
    "rollupTriggerSeconds": ("10", 10),
    "rollupCheckpointLocation": ("rollup/checkpoint", "rollup/checkpoint"),
    "rollupParquetPath": ("rollup/parquet", "rollup/parquet"),
    "rollupPostgresUrl": ("", ""),
    "rollupPostgresTable": ("vhost_throughput", "vhost_throughput"),
    "rollupSubscription": ("starlight-rollup", "starlight-rollup"),
    "authorizationEnabled": ("false", False),
    "amqpAllowUnauthenticatedRemote": ("false", False),
    "amqpAutoCreateVhosts": ("false", False),
    "amqpLazySubscriptions": ("true", True),
    "amqpPriorityQueueReadAhead": ("100", 100),
    "superUserRoles": ("", ()),
    "amqpHandshakeTimeoutMs": ("10000", 10000),
    "amqpProxyProtocolTrustedNetworks": ("", ()),
    "metricsListener": ("http://0.0.0.0:15692", MetricsListener("0.0.0.0", 15692)),
    "managementListener": ("", None),
    "managementMonitoringRoles": ("", ()),
    "amqpClusterName": ("starlight-rabbitmq", "starlight-rabbitmq"),
    "amqpNodeName": ("", ""),
    "usageEventsEnabled": ("true", True),
    "usageEventsTopic": (
        "persistent://public/starlight-system/usage-events",
        "persistent://public/starlight-system/usage-events",
    ),
    "usageEventsIntervalSeconds": ("10", 10),
    "zooKeeperSessionTimeoutMs": ("30000", 30000),
    "gatewayCompiledHotPath": ("true", True),
    "gatewayMemoryAllocator": ("auto", "auto"),
    "amqpServerProduct": ("RabbitMQ", "RabbitMQ"),
    "amqpServerVersion": ("3.13.7", "3.13.7"),
}

ALL_KEYS = {**REFERENCE_KEYS, **GATEWAY_KEYS}
SCHEMA = {spec.name: spec for spec in describe_keys()}

BASE = (
    "brokerServiceURL=pulsar://127.0.0.1:6650\n"
    "brokerWebServiceURL=http://127.0.0.1:8080\n"
    "configurationStoreServers=127.0.0.1:2181\n"
)
BASE_LINES = BASE.count("\n")

CERT = "tlsCertificateFilePath=/etc/gw/cert.pem\ntlsKeyFilePath=/etc/gw/key.pem\n"
# For the tests of listeners on other addresses than loopback, with authentication off.
OPEN = "amqpAllowUnauthenticatedRemote=true\n"
SECRET = "data:;base64,c2VjcmV0LWtleS1ieXRlcw=="


def load(extra: str = "", environ: dict[str, str] | None = None) -> GatewayConfig:
    return config_from_text(BASE + extra, {} if environ is None else environ, source="test.conf")


def assert_clean(error: ConfigError) -> str:
    """One line, and nothing chained that a traceback would show."""
    message = str(error)
    assert message
    assert len(message.splitlines()) == 1, message
    assert message.isprintable(), message
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__
    return message


def config_error(extra: str = "", environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load(extra, environ)
    return assert_clean(info.value)


# --------------------------------------------------------------------------------------------
# The schema against the reference
# --------------------------------------------------------------------------------------------


def test_schema_has_exactly_the_reference_keys_plus_ours() -> None:
    assert set(SCHEMA) == set(ALL_KEYS)
    assert {name for name, spec in SCHEMA.items() if spec.gateway_specific} == set(GATEWAY_KEYS)
    assert all(spec.section is Section.GATEWAY for spec in SCHEMA.values() if spec.gateway_specific)
    assert {name for name, spec in SCHEMA.items() if spec.required} == {
        "brokerServiceURL",
        "brokerWebServiceURL",
        "configurationStoreServers",
    }


def test_the_fixed_metadata_prefix_is_not_a_key() -> None:
    assert not any("prefix" in name.lower() for name in SCHEMA)


@pytest.mark.parametrize("name", sorted(ALL_KEYS))
def test_schema_default_text_matches_reference(name: str) -> None:
    spec = SCHEMA[name]
    written, _ = ALL_KEYS[name]
    if written is REQUIRED:
        assert spec.required
    else:
        assert not spec.required
        assert spec.default == written


@pytest.mark.parametrize("name", sorted(ALL_KEYS))
def test_loaded_default_matches_reference(name: str) -> None:
    written, value = ALL_KEYS[name]
    config = load()
    if written is REQUIRED:
        return
    assert getattr(config, name) == value
    assert type(getattr(config, name)) is type(value)


@pytest.mark.parametrize(
    "spec", [spec for spec in describe_keys() if not spec.required], ids=lambda spec: spec.name
)
def test_default_is_what_parsing_the_default_text_gives(spec: ConfigKey) -> None:
    explicit = load(f"{spec.name}={spec.default}\n")
    assert getattr(explicit, spec.name) == getattr(load(), spec.name)


_PYTHON_TYPES: dict[Kind, Any] = {
    Kind.INT: int,
    Kind.BOOL: bool,
    Kind.STRING_LIST: tuple[str, ...],
    Kind.MECHANISMS: tuple[str, ...],
    Kind.TLS_PROTOCOLS: tuple[str, ...],
    Kind.TLS_CIPHERS: tuple[str, ...],
    Kind.LISTENERS: tuple[Listener, ...],
    Kind.SECONDS_LIST: tuple[int, ...],
    Kind.NETWORKS: tuple[str, ...],
    Kind.METRICS_URL: MetricsListener | None,
    Kind.MANAGEMENT_URL: MetricsListener | None,
}


@pytest.mark.parametrize("spec", describe_keys(), ids=lambda spec: spec.name)
def test_attribute_type_matches_kind(spec: ConfigKey) -> None:
    hints = typing.get_type_hints(GatewayConfig)
    assert hints[spec.name] == _PYTHON_TYPES.get(spec.kind, str)


def test_descriptions_fit_in_a_table_cell() -> None:
    for spec in describe_keys():
        assert spec.description, spec.name
        assert "|" not in spec.description and "\n" not in spec.description, spec.name


def test_secret_keys() -> None:
    secrets = {name for name, spec in SCHEMA.items() if spec.secret}
    assert secrets == {
        "tokenSecretKey",
        "brokerClientAuthenticationParameters",
        "amqpBrokerClientAuthenticationParameters",
        "brokerClientTlsTrustStorePassword",
        "tlsKeyStorePassword",
        "tlsTrustStorePassword",
        "rollupPostgresUrl",
    }


# --------------------------------------------------------------------------------------------
# The file format
# --------------------------------------------------------------------------------------------


def test_comments_blank_lines_whitespace_bom_and_crlf() -> None:
    text = (
        "\ufeff# a comment\r\n"
        "! another comment\r\n"
        "\r\n"
        "   \t\r\n"
        "  brokerServiceURL   =   pulsar://127.0.0.1:6650  \r\n"
        "brokerWebServiceURL=http://127.0.0.1:8080\r"
        "configurationStoreServers = 127.0.0.1:2181\n"
        "   # indented comment with = sign\n"
        "tokenAudience =\n"
        "tokenAuthClaim=a=b\n"
    )
    config = config_from_text(text, {})
    assert config.brokerServiceURL == "pulsar://127.0.0.1:6650"
    assert config.brokerWebServiceURL == "http://127.0.0.1:8080"
    assert config.tokenAudience == ""
    assert config.tokenAuthClaim == "a=b"  # only the first '=' separates


def test_backslash_continues_a_line() -> None:
    config = load("tlsCiphers=TLS_AES_128_GCM_SHA256, \\\n    TLS_AES_256_GCM_SHA384\n")
    assert config.tlsCiphers == ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384")


def test_a_trailing_backslash_on_the_last_line_is_dropped() -> None:
    assert load("tokenAuthClaim=role\\").tokenAuthClaim == "role"


def test_an_escaped_backslash_does_not_continue() -> None:
    config = load("tokenAuthClaim=a\\\\\ntokenAudience=b\n")
    assert config.tokenAuthClaim == "a\\\\"
    assert config.tokenAudience == "b"


def test_a_comment_ending_in_a_backslash_does_not_continue() -> None:
    assert load("# comment \\\ntokenAudience=b\n").tokenAudience == "b"


def test_line_without_equals_names_file_and_line() -> None:
    message = config_error("amqpListeners amqp://127.0.0.1:5672\n")
    assert message.startswith(f"test.conf:{BASE_LINES + 1}: ")
    assert "key=value" in message


def test_line_without_key() -> None:
    message = config_error("=value\n")
    assert f"test.conf:{BASE_LINES + 1}" in message and "no key" in message


def test_unknown_key_with_suggestion() -> None:
    message = config_error("amqpListner=amqp://127.0.0.1:5672\n")
    assert message.startswith(f"test.conf:{BASE_LINES + 1}: unknown key 'amqpListner'")
    assert "did you mean amqpListeners?" in message


def test_unknown_key_differing_only_in_case() -> None:
    message = config_error("AMQPLISTENERS=amqp://127.0.0.1:5672\n")
    assert "did you mean amqpListeners?" in message and "case-sensitive" in message


def test_unknown_key_without_close_match() -> None:
    message = config_error("somethingElseEntirely=1\n")
    assert "unknown key 'somethingElseEntirely'" in message
    assert "did you mean" not in message


def test_pulsar_only_keys_are_unknown() -> None:
    # The fixed ZooKeeper prefix and broker settings are not ours to configure.
    message = config_error("messagingProtocols=rabbitmq\n")
    assert "unknown key 'messagingProtocols'" in message


def test_duplicate_key_names_both_lines() -> None:
    message = config_error("amqpHeartbeatDelay=10\n# x\namqpHeartbeatDelay=20\n")
    assert message.startswith(f"test.conf:{BASE_LINES + 3}: duplicate key amqpHeartbeatDelay")
    assert f"line {BASE_LINES + 1}" in message


def test_missing_required_keys_are_all_named() -> None:
    with pytest.raises(ConfigError) as info:
        config_from_text("brokerServiceURL=pulsar://h:6650\n", {}, source="x.conf")
    message = assert_clean(info.value)
    assert "brokerWebServiceURL" in message and "configurationStoreServers" in message
    assert "brokerServiceURL," not in message
    assert "x.conf" in message and ENV_PREFIX in message
    assert info.value.key == "configurationStoreServers"


@pytest.mark.parametrize(
    "name", ["brokerServiceURL", "brokerWebServiceURL", "configurationStoreServers"]
)
def test_empty_required_key_is_missing(name: str) -> None:
    text = re.sub(rf"^{name}=.*$", f"{name}=", BASE, flags=re.M)
    with pytest.raises(ConfigError) as info:
        config_from_text(text, {})
    assert name in assert_clean(info.value)


# --------------------------------------------------------------------------------------------
# Reading files
# --------------------------------------------------------------------------------------------


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "gw.conf"
    path.write_text(BASE + "amqpHeartbeatDelay=30\n")
    assert load_config(str(path), {}).amqpHeartbeatDelay == 30
    assert load_config(path, {}).amqpHeartbeatDelay == 30


def test_errors_in_a_file_name_the_path_and_line(tmp_path: Path) -> None:
    path = tmp_path / "gw.conf"
    path.write_text(BASE + "amqpHeartbeatDelay=often\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    message = assert_clean(info.value)
    assert message.startswith(f"{path}:{BASE_LINES + 1}: amqpHeartbeatDelay: ")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.conf"
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    message = assert_clean(info.value)
    assert str(path) in message and "No such file" in message


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, {})
    assert str(tmp_path) in assert_clean(info.value)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "secret.conf"
    path.write_text(BASE)
    path.chmod(0)
    if os.geteuid() == 0:  # root reads anything: make open() fail as it would for a user

        def refuse(*args: object, **kwargs: object) -> typing.NoReturn:
            raise PermissionError(13, "Permission denied", str(path))

        monkeypatch.setattr(gateway.config.loading, "open", refuse, raising=False)
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    message = assert_clean(info.value)
    assert str(path) in message and "Permission denied" in message


def test_nul_byte_in_path() -> None:
    with pytest.raises(ConfigError) as info:
        load_config("bad\0path.conf", {})
    assert "bad" in assert_clean(info.value)


def test_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.conf"
    path.write_bytes(BASE.encode() + b"tokenAudience=caf\xe9\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    message = assert_clean(info.value)
    assert f"{path}:{BASE_LINES + 1}" in message and "UTF-8" in message


def test_no_file_means_environment_and_defaults() -> None:
    environ = {
        "STARLIGHT_brokerServiceURL": "pulsar://127.0.0.1:6650",
        "STARLIGHT_brokerWebServiceURL": "http://127.0.0.1:8080",
        "STARLIGHT_configurationStoreServers": "127.0.0.1:2181",
    }
    config = load_config(None, environ)
    assert config.configurationStoreServers == "127.0.0.1:2181"
    with pytest.raises(ConfigError) as info:
        load_config(None, {})
    assert "brokerServiceURL" in assert_clean(info.value)


def test_environ_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "gw.conf"
    path.write_text(BASE)
    monkeypatch.setenv("STARLIGHT_amqpSessionCountLimit", "7")
    assert load_config(path).amqpSessionCountLimit == 7
    assert load_config(path, {}).amqpSessionCountLimit == 256


# --------------------------------------------------------------------------------------------
# The environment
# --------------------------------------------------------------------------------------------


def test_environment_overrides_the_file() -> None:
    config = load(
        "amqpSessionCountLimit=100\namqpBatchingEnabled=true\n" + OPEN,
        {
            "STARLIGHT_amqpSessionCountLimit": " 12 ",
            "STARLIGHT_amqpBatchingEnabled": "FALSE",
            "STARLIGHT_amqpListeners": "amqp://0.0.0.0:5673,amqp://[::1]:5674",
            "STARLIGHT_brokerServiceURL": "pulsar://broker:6650",
            "PATH": "/usr/bin",
            "starlight_amqpHeartbeatDelay": "ignored: the prefix is case-sensitive",
        },
    )
    assert config.amqpSessionCountLimit == 12
    assert config.amqpBatchingEnabled is False
    assert config.amqpListeners == (
        Listener("amqp", "0.0.0.0", 5673),
        Listener("amqp", "::1", 5674),
    )
    assert config.brokerServiceURL == "pulsar://broker:6650"
    assert config.amqpHeartbeatDelay == 0


def test_environment_may_set_a_key_to_empty() -> None:
    config = load("tokenAudience=x\n", {"STARLIGHT_tokenAudience": ""})
    assert config.tokenAudience == ""


def test_environment_does_not_hide_a_bad_file_line() -> None:
    # The file is still parsed; an override does not make an unknown key acceptable.
    message = config_error("amqpListner=x\n", {"STARLIGHT_amqpListeners": "amqp://h:1"})
    assert "amqpListner" in message


def test_an_overridden_bad_file_value_is_not_validated() -> None:
    config = load("amqpHeartbeatDelay=bad\n", {"STARLIGHT_amqpHeartbeatDelay": "5"})
    assert config.amqpHeartbeatDelay == 5


def test_bad_environment_value_names_the_variable() -> None:
    message = config_error("", {"STARLIGHT_amqpHeartbeatDelay": "soon"})
    assert message.startswith("environment variable STARLIGHT_amqpHeartbeatDelay: ")
    assert "amqpHeartbeatDelay" in message and "'soon'" in message


def test_unknown_environment_variable() -> None:
    with pytest.raises(ConfigError) as info:
        load("", {"STARLIGHT_amqpListner": "amqp://h:1"})
    message = assert_clean(info.value)
    assert "STARLIGHT_amqpListner" in message
    assert "did you mean STARLIGHT_amqpListeners?" in message
    assert info.value.key == "STARLIGHT_amqpListner"


def test_upper_case_environment_variable_is_unknown_with_hint() -> None:
    message = config_error("", {"STARLIGHT_AMQPLISTENERS": "amqp://h:1"})
    assert "did you mean STARLIGHT_amqpListeners?" in message


def test_missing_required_key_can_come_from_the_environment() -> None:
    text = BASE.replace("brokerServiceURL=pulsar://127.0.0.1:6650\n", "")
    config = config_from_text(text, {"STARLIGHT_brokerServiceURL": "pulsar+ssl://b:6651"})
    assert config.brokerServiceURL == "pulsar+ssl://b:6651"
    assert config.broker_tls


# --------------------------------------------------------------------------------------------
# Values of every kind
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "name", "expected"),
    [
        ("amqpSessionCountLimit=1", "amqpSessionCountLimit", 1),
        ("amqpSessionCountLimit=65535", "amqpSessionCountLimit", 65535),
        ("amqpSessionCountLimit=+12", "amqpSessionCountLimit", 12),
        ("amqpHeartbeatDelay=60", "amqpHeartbeatDelay", 60),
        ("amqpNetworkBufferSize=4096", "amqpNetworkBufferSize", 4096),
        ("amqpMaxMessageSize=1", "amqpMaxMessageSize", 1),
        ("amqpConnectionCloseTimeout=0", "amqpConnectionCloseTimeout", 0),
        ("usageEventsIntervalSeconds=1", "usageEventsIntervalSeconds", 1),
        ("amqpBatchingEnabled=FALSE", "amqpBatchingEnabled", False),
        ("amqpMapShortVhostToTenant=True", "amqpMapShortVhostToTenant", True),
        ("tlsAllowInsecureConnection=true", "tlsAllowInsecureConnection", True),
        ("tokenAuthClaim=role", "tokenAuthClaim", "role"),
        ("advertisedAddress=gw-1.example.com", "advertisedAddress", "gw-1.example.com"),
        ("advertisedAddress=[::1]", "advertisedAddress", "[::1]"),
        ("amqpDefaultTenant=my-tenant_1", "amqpDefaultTenant", "my-tenant_1"),
        ("amqpDefaultNamespace=ns.a=b:c", "amqpDefaultNamespace", "ns.a=b:c"),
        ("superUserRoles= admin , ops,,admin,", "superUserRoles", ("admin", "ops")),
        ("amqpAuthenticationMechanisms=plain, AMQPLAIN", "amqpAuthenticationMechanisms",
         ("PLAIN", "AMQPLAIN")),
        ("tlsProtocols=tlsv1.3,TLSv1.2", "tlsProtocols", ("TLSv1.3", "TLSv1.2")),
        ("tlsCiphers=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,ECDHE-RSA-AES128-GCM-SHA256",
         "tlsCiphers", ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256")),
        ("tlsKeyStoreType=pkcs12", "tlsKeyStoreType", "PKCS12"),
        ("tlsTrustStoreType=", "tlsTrustStoreType", "PKCS12"),
        ("tlsProvider=openssl", "tlsProvider", "OpenSSL"),
        ("tlsProvider=JDK", "tlsProvider", "JDK"),
        ("tokenPublicKey=file:///etc/gw/public.der", "tokenPublicKey", "file:///etc/gw/public.der"),
        ("tokenSecretKey=" + SECRET, "tokenSecretKey", SECRET),
        ("tokenPublicKey=data:application/octet-stream;base64,AAEC", "tokenPublicKey",
         "data:application/octet-stream;base64,AAEC"),
        ("brokerClientAuthenticationPlugin=token\nbrokerClientAuthenticationParameters=token:x",
         "brokerClientAuthenticationPlugin", "token"),
    ],
)  # fmt: skip
def test_file_values(line: str, name: str, expected: object) -> None:
    assert getattr(load(line + "\n"), name) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("amqp://127.0.0.1:5672", [("amqp", "127.0.0.1", 5672)]),
        ("AMQP://localhost", [("amqp", "localhost", 5672)]),
        ("amqp://0.0.0.0:5672/", [("amqp", "0.0.0.0", 5672)]),
        ("amqp://[::]:5672, amqp://host-1.example.com:15672",
         [("amqp", "::", 5672), ("amqp", "host-1.example.com", 15672)]),
        ("amqp://a:5672,amqp://b:5672,", [("amqp", "a", 5672), ("amqp", "b", 5672)]),
    ],
)  # fmt: skip
def test_listeners(value: str, expected: list[tuple[str, str, int]]) -> None:
    listeners = load(f"amqpListeners={value}\n" + OPEN).amqpListeners
    assert [(x.scheme, x.host, x.port) for x in listeners] == expected


def test_amqps_listener_with_pem_files() -> None:
    config = load("amqpListeners=amqp://h:5672,amqps://h\n" + CERT + OPEN)
    assert config.amqpListeners[1] == Listener("amqps", "h", 5671)
    assert config.tls_listeners == (Listener("amqps", "h", 5671),)
    assert config.amqpListeners[1].tls and not config.amqpListeners[0].tls
    assert str(Listener("amqps", "::1", 5671)) == "amqps://[::1]:5671"


def test_amqps_listener_with_key_store() -> None:
    config = load(
        "amqpListeners=amqps://h:5671\ntlsEnabledWithKeyStore=true\ntlsKeyStore=/k.p12\n" + OPEN
    )
    assert config.tlsEnabledWithKeyStore and config.tlsKeyStore == "/k.p12"


@pytest.mark.parametrize(
    "value",
    [
        "pulsar://127.0.0.1:6650",
        "pulsar://b1:6650,b2:6650,b3",
        "pulsar+ssl://broker.example.com:6651/",
        "PULSAR://b:6650",
        "pulsar://[::1]:6650",
    ],
)
def test_pulsar_urls(value: str) -> None:
    config = load("", {"STARLIGHT_brokerServiceURL": value})
    assert config.brokerServiceURL.lower() == value.lower()
    assert config.brokerServiceURL.startswith("pulsar")


@pytest.mark.parametrize(
    "value",
    ["http://127.0.0.1:8080", "https://a:8443,b:8443", "http://admin.example.com/pulsar"],
)
def test_web_urls(value: str) -> None:
    assert load("", {"STARLIGHT_brokerWebServiceURL": value}).brokerWebServiceURL == value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:2181", "127.0.0.1:2181"),
        ("zk1:2181,zk2:2181,zk3", "zk1:2181,zk2:2181,zk3"),
        ("zk:zk1:2181,zk2:2181/pulsar", "zk1:2181,zk2:2181/pulsar"),
        ("zk://zk1:2181", "zk1:2181"),
        ("[::1]:2181", "[::1]:2181"),
    ],
)
def test_zookeeper_connection_strings(value: str, expected: str) -> None:
    config = load("", {"STARLIGHT_configurationStoreServers": value})
    assert config.configurationStoreServers == expected


# --------------------------------------------------------------------------------------------
# Bad values: a one-line ConfigError naming the key, file and line
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "fragments"),
    [
        ("amqpSessionCountLimit=abc", ["integer from 1 to 65535", "'abc'"]),
        ("amqpSessionCountLimit=0", ["integer from 1 to 65535", "'0'"]),
        ("amqpSessionCountLimit=65536", ["integer from 1 to 65535"]),
        ("amqpSessionCountLimit=1_000", ["integer"]),
        ("amqpSessionCountLimit=\u0661\u0662", ["integer"]),
        ("amqpSessionCountLimit=12.0", ["integer"]),
        ("amqpSessionCountLimit=" + "9" * 5000, ["integer"]),
        ("amqpSessionCountLimit=", ["integer"]),
        ("amqpHeartbeatDelay=-1", ["from 0 to 65535"]),
        ("amqpHeartbeatTimeoutFactor=0", [">= 1"]),
        ("amqpNetworkBufferSize=4095", ["4096"]),
        ("amqpNetworkBufferSize=4294967296", ["4294967295"]),
        ("amqpMaxMessageSize=0", [">= 1"]),
        ("usageEventsIntervalSeconds=0", [">= 1"]),
        ("zooKeeperSessionTimeoutMs=10", [">= 1000"]),
        ("amqpHandshakeTimeoutMs=0", [">= 1"]),
        ("authenticationEnabled=yes", ["true or false", "'yes'"]),
        ("amqpBatchingEnabled=1", ["true or false"]),
        ("amqpBatchingEnabled=", ["true or false"]),
        ("amqpListeners=", ["at least one"]),
        ("amqpListeners=http://h:5672", ["'http'", "amqp:// or amqps://"]),
        ("amqpListeners=127.0.0.1:5672", ["amqp[s]://<host>:<port>"]),
        ("amqpListeners=amqp://h:99999", ["outside 1..65535"]),
        ("amqpListeners=amqp://h:0", ["outside 1..65535"]),
        ("amqpListeners=amqp://h:http", ["invalid port 'http'"]),
        ("amqpListeners=amqp://h:", ["invalid port"]),
        ("amqpListeners=amqp://:5672", ["no host"]),
        ("amqpListeners=amqp://::1:5672", ["brackets"]),
        ("amqpListeners=amqp://[::1", ["unclosed"]),
        ("amqpListeners=amqp://[nope]:1", ["IPv6"]),
        ("amqpListeners=amqp://h:1/vhost", ["no path"]),
        ("amqpListeners=amqp://user@h:1", ["no path, user"]),
        ("amqpListeners=amqp://bad host:1", ["invalid host name"]),
        ("amqpListeners=amqp://h\u00e9:1", ["invalid host name"]),
        ("amqpListeners=amqp://a:1,amqp://a:1", ["same address"]),
        ("amqpListeners=amqp://a:1 # local", ["amqp[s]://<host>:<port>"]),
        (
            "amqpAuthenticationMechanisms=PLAIN,CRAM-MD5",
            ["'CRAM-MD5'", "PLAIN, AMQPLAIN, EXTERNAL"],
        ),
        ("amqpAuthenticationMechanisms=", ["at least one"]),
        ("amqpAuthenticationMechanisms=,", ["at least one"]),
        ("tlsProtocols=SSLv3", ["'SSLv3'", "TLSv1.3"]),
        ("tlsProtocols=TLSv1.4", ["unsupported TLS protocol"]),
        ("tlsCiphers=AES 128", ["invalid cipher suite name 'AES 128'"]),
        ("tlsKeyStoreType=BKS", ["only PKCS12"]),
        ("tlsProvider=Conscrypt", ["'Conscrypt'", "OpenSSL"]),
        ("tlsProvider=BC", ["'BC'"]),
        ("tokenPublicKey=c2VjcmV0", ["data:;base64,", "file:///"]),
        ("tokenPublicKey=data:;base64,!!!", ["base64"]),
        ("tokenPublicKey=data:;base64,", ["empty key"]),
        ("tokenPublicKey=data:,plain-text", ["base64"]),
        ("tokenPublicKey=file://relative/key", ["file:///<absolute path>"]),
        ("tokenPublicKey=file:///", ["file:///<absolute path>"]),
        ("amqpDefaultTenant=my tenant", ["Pulsar name"]),
        ("amqpDefaultTenant=a/b", ["Pulsar name"]),
        ("amqpDefaultNamespace=", ["Pulsar name"]),
        ("advertisedAddress=bad_host!", ["invalid host name"]),
        ("advertisedAddress=[zz]", ["IPv6"]),
        ("brokerClientAuthenticationPlugin=com.example.MyAuth", ["'com.example.MyAuth'"]),
        ("amqpServerVersion=4.0.0-beta.5", ["RabbitMQ version", "'4.0.0-beta.5'"]),
        ("amqpServerVersion=4", ["numbers only"]),
        ("amqpServerVersion=", ["such as 3.13.7"]),
    ],
)
def test_bad_values(line: str, fragments: list[str]) -> None:
    name = line.partition("=")[0]
    message = config_error(line + "\n")
    assert message.startswith(f"test.conf:{BASE_LINES + 1}: {name}: "), message
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize(
    ("name", "value", "fragments"),
    [
        ("brokerServiceURL", "http://b:6650", ["pulsar:// or pulsar+ssl://", "'http://'"]),
        ("brokerServiceURL", "b:6650", ["pulsar:// or pulsar+ssl:// URL"]),
        ("brokerServiceURL", "pulsar://", ["no host"]),
        ("brokerServiceURL", "pulsar://b:6650/path", ["no path"]),
        ("brokerServiceURL", "pulsar://b:66500", ["outside 1..65535"]),
        ("brokerServiceURL", "pulsar://b:6650,", ["no host"]),
        ("brokerServiceURL", "pulsar://b:6650?x=1", ["no user, query"]),
        ("brokerWebServiceURL", "ftp://b", ["http:// or https://"]),
        ("brokerWebServiceURL", "http://a b", ["spaces"]),
        ("configurationStoreServers", "etcd://e:2379", ["only a ZooKeeper"]),
        ("configurationStoreServers", "rocksdb:/data", ["only a ZooKeeper"]),
        ("configurationStoreServers", "zk1:2181/", ["chroot"]),
        ("configurationStoreServers", "zk1:2181 zk2:2181", ["spaces"]),
        ("configurationStoreServers", "zk1:abc", ["invalid port"]),
    ],
)
def test_bad_urls(name: str, value: str, fragments: list[str]) -> None:
    message = config_error("", {f"STARLIGHT_{name}": value})
    assert message.startswith(f"environment variable STARLIGHT_{name}: {name}: "), message
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize(
    "name", ["tlsKeyStoreType", "tlsTrustStoreType", "brokerClientTlsTrustStoreType"]
)
@pytest.mark.parametrize("value", ["JKS", "jks"])
def test_jks_is_rejected_with_conversion_hint(name: str, value: str) -> None:
    message = config_error(f"{name}={value}\n")
    assert message.startswith(f"test.conf:{BASE_LINES + 1}: {name}: JKS")
    assert "keytool -importkeystore" in message and "PKCS12" in message


def test_tls_protocols_follow_the_ssl_module(monkeypatch: pytest.MonkeyPatch) -> None:
    import ssl

    monkeypatch.setattr(ssl, "HAS_TLSv1", False)
    assert "not supported by this Python" in config_error("tlsProtocols=TLSv1\n")
    monkeypatch.setattr(ssl, "HAS_TLSv1", True)
    assert load("tlsProtocols=TLSv1\n").tlsProtocols == ("TLSv1",)


def test_secret_values_are_never_echoed() -> None:
    message = config_error("tokenSecretKey=hunter2-very-secret\n")
    assert "hunter2" not in message and "tokenSecretKey" in message
    message = config_error("tokenSecretKey=file://hunter2\n")
    assert "hunter2" not in message


def test_control_characters_in_values_stay_on_one_line() -> None:
    message = config_error("tokenAudience=x\namqpHeartbeatDelay=1\u2028\x1c\x85\x00 2\n")
    assert "amqpHeartbeatDelay" in message


# --------------------------------------------------------------------------------------------
# Cross-key rules
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "key", "fragments"),
    [
        ("amqpListeners=amqps://h:5671\n", "amqpListeners",
         ["amqps://h:5671", "tlsCertificateFilePath", "tlsKeyFilePath", "tlsKeyStore"]),
        ("amqpListeners=amqps://h:5671\ntlsCertificateFilePath=/c.pem\n", "amqpListeners",
         ["tlsKeyFilePath"]),
        ("amqpListeners=amqps://h:5671\ntlsKeyFilePath=/k.pem\n", "amqpListeners",
         ["tlsCertificateFilePath"]),
        ("tlsEnabledWithKeyStore=true\n", "tlsEnabledWithKeyStore", ["tlsKeyStore"]),
        ("brokerClientTlsEnabledWithKeyStore=true\n", "brokerClientTlsEnabledWithKeyStore",
         ["brokerClientTlsTrustStore"]),
        ("amqpAuthenticationMechanisms=EXTERNAL\n", "amqpAuthenticationMechanisms",
         ["EXTERNAL", "amqps://"]),
        ("amqpAuthenticationMechanisms=PLAIN,EXTERNAL\namqpListeners=amqps://h:5671\n" + CERT,
         "amqpAuthenticationMechanisms", ["EXTERNAL", "tlsTrustCertsFilePath", "tlsTrustStore"]),
        ("tlsRequireTrustedClientCertOnConnect=true\n", "tlsRequireTrustedClientCertOnConnect",
         ["tlsTrustCertsFilePath"]),
        ("authenticationEnabled=true\n", "authenticationEnabled",
         ["PLAIN", "tokenSecretKey", "tokenPublicKey"]),
        ("authenticationEnabled=true\namqpAuthenticationMechanisms=AMQPLAIN\n",
         "authenticationEnabled", ["AMQPLAIN", "tokenSecretKey"]),
        (f"tokenSecretKey={SECRET}\ntokenPublicKey=file:///p.der\n", "tokenSecretKey",
         ["only one", "tokenPublicKey"]),
        ("tokenAudienceClaim=aud\n", "tokenAudienceClaim", ["tokenAudience "]),
        ("authorizationEnabled=true\n", "authorizationEnabled", ["authenticationEnabled"]),
        ("tlsEnabledWithBroker=true\n", "brokerServiceURL",
         ["pulsar+ssl://", "tlsEnabledWithBroker"]),
        ("brokerClientAuthenticationPlugin=tls\n", "brokerClientAuthenticationPlugin",
         ["brokerClientAuthenticationParameters"]),
        ("brokerClientAuthenticationParameters=token:abc\n", "brokerClientAuthenticationParameters",
         ["brokerClientAuthenticationPlugin"]),
        ("amqpBrokerClientAuthenticationParameters=token:abc\n",
         "amqpBrokerClientAuthenticationParameters", ["brokerClientAuthenticationPlugin"]),
    ],
)  # fmt: skip
def test_cross_key_errors(extra: str, key: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load(extra)
    message = assert_clean(info.value)
    assert info.value.key == key
    assert f"{key}: " in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert "abc" not in message  # credentials are not echoed


def test_cross_key_error_names_where_the_key_was_set() -> None:
    message = config_error("amqpListeners=amqps://h:5671\n")
    assert message.startswith(f"test.conf:{BASE_LINES + 1}: amqpListeners: ")


def test_tls_to_broker_needs_https_too() -> None:
    message = config_error(
        "tlsEnabledWithBroker=true\n", {"STARLIGHT_brokerServiceURL": "pulsar+ssl://b:6651"}
    )
    assert "brokerWebServiceURL" in message and "https://" in message


def test_consistent_secure_configuration_loads() -> None:
    config = load(
        "amqpListeners=amqp://127.0.0.1:5672,amqps://0.0.0.0:5671\n"
        + CERT
        + "tlsTrustCertsFilePath=/etc/gw/ca.pem\n"
        "tlsRequireTrustedClientCertOnConnect=true\n"
        "authenticationEnabled=true\n"
        "authorizationEnabled=true\n"
        "superUserRoles=admin\n"
        "amqpAuthenticationMechanisms=PLAIN,EXTERNAL\n"
        f"tokenSecretKey={SECRET}\n"
        "tokenAudienceClaim=aud\n"
        "tokenAudience=starlight\n"
        "tlsEnabledWithBroker=true\n"
        "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
        "brokerClientAuthenticationParameters=token:proxy-token\n"
        "amqpBrokerClientAuthenticationParameters=token:gateway-token\n",
        {
            "STARLIGHT_brokerServiceURL": "pulsar+ssl://b:6651",
            "STARLIGHT_brokerWebServiceURL": "https://b:8443",
        },
    )
    assert config.broker_tls
    assert config.broker_client_auth_kind == "token"
    assert config.effective_broker_client_authentication_parameters == "token:gateway-token"
    assert config.amqpAuthenticationMechanisms == ("PLAIN", "EXTERNAL")
    assert "proxy-token" not in repr(config) and "gateway-token" not in repr(config)
    assert SECRET not in repr(config)


def test_external_with_key_store_trust() -> None:
    config = load(
        "amqpListeners=amqps://h:5671\namqpAuthenticationMechanisms=EXTERNAL\n"
        "tlsEnabledWithKeyStore=true\ntlsKeyStore=/k.p12\ntlsTrustStore=/t.p12\n" + OPEN
    )
    assert config.amqpAuthenticationMechanisms == ("EXTERNAL",)


def test_authentication_without_token_mechanisms_needs_no_key() -> None:
    config = load(
        "authenticationEnabled=true\namqpAuthenticationMechanisms=EXTERNAL\n"
        "amqpListeners=amqps://h:5671\n" + CERT + "tlsTrustCertsFilePath=/ca.pem\n"
    )
    assert config.authenticationEnabled


# --------------------------------------------------------------------------------------------
# Convenience properties
# --------------------------------------------------------------------------------------------


def test_derived_values() -> None:
    config = load(
        "amqpHeartbeatDelay=30\namqpHeartbeatTimeoutFactor=3\namqpNetworkBufferSize=131072\n"
        "amqpSessionCountLimit=2047\namqpConnectionCloseTimeout=1500\n"
        "amqpHandshakeTimeoutMs=2500\nzooKeeperSessionTimeoutMs=15000\n"
    )
    assert config.heartbeat == 30
    assert config.heartbeat_timeout == 90.0
    assert config.heartbeat_timeout_for(10) == 30.0
    assert config.heartbeat_timeout_for(0) is None
    assert config.frame_max == 131072
    assert config.channel_max == 2047
    assert config.connection_close_timeout == 1.5
    assert config.handshake_timeout == 2.5
    assert config.zookeeper_session_timeout == 15.0


@pytest.mark.parametrize(
    ("keys", "offered"),
    [
        # Authentication off (the default): AMQPLAIN, PLAIN's credentials as a table, too.
        ("", ("PLAIN", "AMQPLAIN")),
        ("amqpAuthenticationMechanisms=AMQPLAIN,PLAIN\n", ("AMQPLAIN", "PLAIN")),
        (
            "amqpAuthenticationMechanisms=PLAIN,EXTERNAL\namqpListeners=amqps://h:5671\n"
            + CERT
            + "tlsTrustCertsFilePath=/ca.pem\n"
            + OPEN,
            ("PLAIN", "AMQPLAIN", "EXTERNAL"),
        ),
        (
            "amqpAuthenticationMechanisms=EXTERNAL\namqpListeners=amqps://h:5671\n"
            + CERT
            + "tlsTrustCertsFilePath=/ca.pem\n"
            + OPEN,
            ("EXTERNAL",),
        ),
        # Authentication on: exactly what the key lists (the reference's default: PLAIN).
        (f"authenticationEnabled=true\ntokenSecretKey={SECRET}\n", ("PLAIN",)),
    ],
)
def test_offered_mechanisms(keys: str, offered: tuple[str, ...]) -> None:
    assert load(keys).offered_mechanisms == offered


def test_default_derived_values() -> None:
    config = load()
    assert config.heartbeat_timeout is None  # amqpHeartbeatDelay=0: no heartbeats offered
    assert config.connection_close_timeout == 2.0
    assert config.handshake_timeout == 10.0
    assert config.broker_tls is False
    assert config.broker_client_auth_kind == ""
    assert config.effective_broker_client_authentication_parameters == ""
    assert config.tls_listeners == ()


@pytest.mark.parametrize(
    ("plugin", "kind"),
    [
        ("org.apache.pulsar.client.impl.auth.AuthenticationToken", "token"),
        ("org.apache.pulsar.client.impl.auth.AuthenticationTls", "tls"),
        ("org.apache.pulsar.client.impl.auth.AuthenticationBasic", "basic"),
        ("org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2", "oauth2"),
        ("oauth2", "oauth2"),
    ],
)
def test_broker_client_auth_kind(plugin: str, kind: str) -> None:
    config = load(
        f"brokerClientAuthenticationPlugin={plugin}\nbrokerClientAuthenticationParameters=p\n"
    )
    assert config.broker_client_auth_kind == kind
    assert config.effective_broker_client_authentication_parameters == "p"


def test_advertised_host() -> None:
    assert load().advertised_host == "127.0.0.1"
    assert load("advertisedAddress=gw.example.com\n").advertised_host == "gw.example.com"
    wildcard = load("amqpListeners=amqp://0.0.0.0:5672\n" + OPEN)
    assert wildcard.advertised_host not in ("", "0.0.0.0")


def test_config_is_frozen_and_replaceable() -> None:
    config = load()
    with pytest.raises(AttributeError):
        config.amqpHeartbeatDelay = 5  # type: ignore[misc]
    assert replace(config, amqpHeartbeatDelay=5).amqpHeartbeatDelay == 5


def test_repr_hides_secrets_but_not_empty_ones() -> None:
    config = load("tlsKeyStorePassword=changeit\n")
    assert "changeit" not in repr(config)
    assert "tlsKeyStorePassword='<hidden>'" in repr(config)
    assert "tlsTrustStorePassword=''" in repr(config)


# --------------------------------------------------------------------------------------------
# Generated documents: conf/gateway.conf and the table of docs/configuration.md
# --------------------------------------------------------------------------------------------


def test_example_conf_is_generated_and_complete() -> None:
    text = (REPO / "conf" / "gateway.conf").read_text()
    assert text == render_example_conf(), (
        "conf/gateway.conf drifted: run .venv/bin/python scripts/config_table.py --conf "
        "> conf/gateway.conf"
    )
    for name in ALL_KEYS:
        assert re.search(rf"^#?{name}=", text, re.M), name


def test_example_conf_loads_and_sets_the_local_stack() -> None:
    config = load_config(REPO / "conf" / "gateway.conf", {})
    assert config.brokerServiceURL == "pulsar://127.0.0.1:6650"
    assert config.brokerWebServiceURL == "http://127.0.0.1:8080"
    assert config.configurationStoreServers == "127.0.0.1:2181"
    assert config.amqpListeners == (Listener("amqp", "127.0.0.1", 5672),)
    # Everything else is commented out, i.e. at its default.
    set_keys = re.findall(r"^([A-Za-z]+)=", render_example_conf(), re.M)
    assert sorted(set_keys) == sorted(
        ["brokerServiceURL", "brokerWebServiceURL", "configurationStoreServers", "amqpListeners"]
    )


def test_uncommenting_every_default_in_the_example_changes_nothing() -> None:
    text = re.sub(r"^#([A-Za-z]+=)", r"\1", render_example_conf(), flags=re.M)
    assert config_from_text(text, {}) == load_config(REPO / "conf" / "gateway.conf", {})


def test_markdown_table_lists_every_key_once_per_section() -> None:
    table = render_markdown_table()
    rows = re.findall(r"^\| `([A-Za-z]+)` \| ([^|]+) \|", table, re.M)
    assert [name for name, _ in rows] == [spec.name for spec in describe_keys()]
    for name, default in rows:
        spec = SCHEMA[name]
        if spec.required:
            assert default.strip() == "**required**"
        elif spec.default:
            assert default.strip() == f"`{spec.default}`"
        else:
            assert default.strip() == "*(empty)*"
    for section in Section:
        assert f"**{section.value}**" in table


def test_docs_table_matches_the_config_module() -> None:
    assert TABLE_PAGE.exists(), f"{TABLE_PAGE} is missing"
    text = TABLE_PAGE.read_text()
    match = re.search(
        r"^<!-- config-table:start -->\n(.*?)^<!-- config-table:end -->$", text, re.DOTALL | re.M
    )
    assert match, (
        "docs/configuration.md has no <!-- config-table:start --> ... <!-- config-table:end --> "
        f"lines; add them under 'Every key' and run: {TABLE_COMMAND}"
    )
    assert match.group(1).strip() == render_markdown_table().strip(), (
        "docs/configuration.md's configuration table drifted from gateway/config/; regenerate "
        f"it with: {TABLE_COMMAND}"
    )


def test_script_writes_the_table_between_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\nProse that quotes `<!-- config-table:start -->`.\n\n"
        "<!-- config-table:start -->\nan old table\n<!-- config-table:end -->\n\nAfter.\n"
    )
    for _ in range(2):  # a second write changes nothing
        result = subprocess.run(
            [sys.executable, "scripts/config_table.py", "--write", str(page)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert page.read_text() == (
            "# Title\n\nProse that quotes `<!-- config-table:start -->`.\n\n"
            f"<!-- config-table:start -->\n{render_markdown_table()}"
            "<!-- config-table:end -->\n\nAfter.\n"
        )


@pytest.mark.parametrize(
    ("args", "render"), [([], render_markdown_table), (["--conf"], render_example_conf)]
)
def test_script_prints_the_generated_documents(args: list[str], render: Any) -> None:
    result = subprocess.run(
        [sys.executable, "scripts/config_table.py", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == render()


# --------------------------------------------------------------------------------------------
# Property: any input loads or raises ConfigError, never anything else
# --------------------------------------------------------------------------------------------

_KEY_NAMES = sorted(SCHEMA)
_INTERESTING_VALUES = [
    "",
    "0",
    "-1",
    "65536",
    "true",
    "FALSE",
    "yes",
    "PLAIN,EXTERNAL",
    "amqp://127.0.0.1:5672",
    "amqps://[::1]:5671",
    "amqp://[",
    "pulsar+ssl://b:6651",
    "http://b:8080",
    "zk:a:1/x",
    "JKS",
    "PKCS12",
    SECRET,
    "data:;base64,",
    "file:///k",
    "\\",
]


def _check(text: str, environ: dict[str, str] | None = None) -> None:
    try:
        config = config_from_text(text, environ or {})
    except ConfigError as error:
        assert_clean(error)
    else:
        assert isinstance(config, GatewayConfig)


_line = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda key, sep, value: f"{key}{sep}{value}",
        st.one_of(st.sampled_from(_KEY_NAMES), st.text(max_size=10)),
        st.sampled_from(["=", " = ", "=\t", ":", " "]),
        st.one_of(st.sampled_from(_INTERESTING_VALUES), st.text(max_size=30)),
    ),
    st.sampled_from(["# comment", "! comment", "", "   ", "\\"]),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_arbitrary_text_loads_or_raises_config_error(text: str) -> None:
    _check(text)
    _check(BASE + text)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_line, max_size=12),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.dictionaries(
        st.sampled_from(_KEY_NAMES).map(lambda name: ENV_PREFIX + name),
        st.one_of(st.sampled_from(_INTERESTING_VALUES), st.text(max_size=20)),
        max_size=3,
    ),
)
def test_structured_files_load_or_raise_config_error(
    lines: list[str], newline: str, environ: dict[str, str]
) -> None:
    _check(BASE + newline.join(lines), environ)
    _check(newline.join(lines), environ)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_arbitrary_bytes_on_disk_load_or_raise_config_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "gateway.conf"
        path.write_bytes(BASE.encode() + data)
        try:
            load_config(path, {})
        except ConfigError as error:
            assert_clean(error)


# --------------------------------------------------------------------------------------------
# PROXY protocol trust and Unix socket listeners
# --------------------------------------------------------------------------------------------


def test_trusted_networks_are_canonical_and_deduplicated() -> None:
    config = load("amqpProxyProtocolTrustedNetworks=127.0.0.1/32, UNIX,10.0.0.0/8,unix\n")
    assert config.amqpProxyProtocolTrustedNetworks == ("127.0.0.1/32", "unix", "10.0.0.0/8")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("10.1.2.3/8", "has host bits set"),
        ("localhost", "not a CIDR network"),
        ("10.0.0.0/33", "not a CIDR network"),
    ],
)
def test_bad_trusted_networks(value: str, fragment: str) -> None:
    message = config_error(f"amqpProxyProtocolTrustedNetworks={value}\n")
    assert "amqpProxyProtocolTrustedNetworks" in message and fragment in message, message


def test_unix_listener() -> None:
    config = load("amqpListeners=amqp+unix:///tmp/gw.sock,amqp://127.0.0.1:5672\n")
    unix = config.amqpListeners[0]
    assert unix == Listener("amqp+unix", "", 0, "/tmp/gw.sock")
    assert unix.unix and not unix.tls
    assert unix.url == "amqp+unix:///tmp/gw.sock"


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("amqp+unix://relative.sock", "absolute path"),
        ("amqp+unix:///", "absolute path"),
        ("amqp+unix:///dir/", "invalid socket path"),
        ("amqp+unix:///" + "x" * 120, "longer than 107 bytes"),
        ("amqp+unix:///a.sock,amqp+unix:///a.sock", "use the same address"),
    ],
)
def test_bad_unix_listeners(value: str, fragment: str) -> None:
    message = config_error(f"amqpListeners={value}\n")
    assert fragment in message, message


# --------------------------------------------------------------------------------------------
# Observability keys
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("http://127.0.0.1:9000", MetricsListener("127.0.0.1", 9000)),
        ("http://127.0.0.1:0", MetricsListener("127.0.0.1", 0)),
        ("http://[::1]:15692/", MetricsListener("::1", 15692)),
        ("http://0.0.0.0", MetricsListener("0.0.0.0", 15692)),
    ],
)
def test_metrics_listener(text: str, expected: MetricsListener | None) -> None:
    assert load(f"metricsListener={text}\n").metricsListener == expected


@pytest.mark.parametrize(
    "text", ["https://0.0.0.0:1", "0.0.0.0:15692", "http://h:99999", "http://h:1/metrics"]
)
def test_bad_metrics_listener_names_the_key(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(f"metricsListener={text}\n")
    assert "metricsListener" in assert_clean(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("http://127.0.0.1:15672", MetricsListener("127.0.0.1", 15672)),
        ("http://127.0.0.2", MetricsListener("127.0.0.2", 15672)),
        ("http://[::1]:0/", MetricsListener("::1", 0)),
    ],
)
def test_management_listener(text: str, expected: MetricsListener | None) -> None:
    assert load(f"managementListener={text}\n").managementListener == expected


def test_an_https_management_listener_needs_a_certificate(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load("managementListener=https://127.0.0.1:15671\n")
    assert "managementListener: https://127.0.0.1:15671 needs a certificate" in assert_clean(
        caught.value
    )
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    config = load(
        f"managementListener=https://127.0.0.1:15671\ntlsCertificateFilePath={cert}\n"
        f"tlsKeyFilePath={key}\n"
    )
    assert config.managementListener == MetricsListener("127.0.0.1", 15671, "https")


@pytest.mark.parametrize("text", ["amqp://0.0.0.0:1", "0.0.0.0:15672", "http://h:1/api"])
def test_bad_management_listener_names_the_key(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(f"managementListener={text}\n")
    assert "managementListener" in assert_clean(caught.value)


def test_http_server_port_is_gone() -> None:
    with pytest.raises(ConfigError, match="unknown key 'httpServerPort'"):
        load("httpServerPort=8081\n")


@pytest.mark.parametrize("text", ["usage", "persistent://a/b", "non-persistent://a/b/c"])
def test_bad_usage_topic_names_the_key(text: str) -> None:
    with pytest.raises(ConfigError, match="usageEventsTopic"):
        load(f"usageEventsTopic={text}\n")


def test_node_name_defaults_to_the_host_name() -> None:
    import socket

    assert load().node_name == f"rabbit@{socket.gethostname()}"
    assert load("amqpNodeName=rabbit@gw-3\n").node_name == "rabbit@gw-3"


# ---- an open gateway only on loopback, unless said so (issue 37 item 5) ------------------


@pytest.mark.parametrize(
    "listeners",
    [
        "amqp://127.0.0.1:5672",
        "amqp://127.0.0.2:5672",
        "amqp://localhost:5672",
        "amqp://LOCALHOST:5672",
        "amqp://[::1]:5672",
        "amqp://[::ffff:127.0.0.1]:5672",
        "amqp+unix:///run/starlight/amqp.sock",
    ],
)
def test_authentication_off_on_loopback_starts(listeners: str) -> None:
    config = load(f"amqpListeners={listeners}\n")
    assert config.open_remote_listeners == ()


@pytest.mark.parametrize(
    ("listeners", "reachable"),
    [
        ("amqp://0.0.0.0:5672", "amqp://0.0.0.0:5672"),
        ("amqp://[::]:5672", "amqp://[::]:5672"),
        ("amqp://127.0.0.1:5672,amqps://10.1.2.3:5671", "amqps://10.1.2.3:5671"),
        # A name is not resolved to decide: only localhost counts as loopback.
        ("amqp://gateway.example.com:5672", "amqp://gateway.example.com:5672"),
    ],
)
def test_authentication_off_elsewhere_is_refused_unless_allowed(
    listeners: str, reachable: str
) -> None:
    tls = CERT if "amqps" in listeners else ""
    with pytest.raises(ConfigError) as refused:
        load(f"amqpListeners={listeners}\n" + tls)
    message = assert_clean(refused.value)
    assert message == (
        f"test.conf:{BASE_LINES + 1}: amqpListeners: {reachable} is reachable from other "
        "machines and authenticationEnabled is false, which lets anyone in with any "
        "credentials: set authenticationEnabled=true, listen on 127.0.0.1 only, or set "
        "amqpAllowUnauthenticatedRemote=true"
    )
    allowed = load(f"amqpListeners={listeners}\n" + tls + OPEN)
    assert reachable in [listener.url for listener in allowed.open_remote_listeners]
    authenticated = load(
        f"amqpListeners={listeners}\n"
        + tls
        + f"authenticationEnabled=true\ntokenSecretKey={SECRET}\n"
    )
    assert authenticated.open_remote_listeners == ()


def test_a_management_api_open_to_other_machines_is_refused_unless_allowed() -> None:
    # With authentication off the management API makes anyone an administrator.
    assert load("managementListener=http://127.0.0.1:15672\n").open_remote_listeners == ()
    with pytest.raises(ConfigError) as refused:
        load("managementListener=http://0.0.0.0:15672\n")
    message = assert_clean(refused.value)
    assert "managementListener: http://0.0.0.0:15672 is reachable from other machines" in message
    allowed = load("managementListener=http://0.0.0.0:15672\n" + OPEN)
    assert [listener.url for listener in allowed.open_remote_listeners] == ["http://0.0.0.0:15672"]


def test_the_environment_may_open_a_gateway_too() -> None:
    environ = {"STARLIGHT_amqpListeners": "amqp://0.0.0.0:5672"}
    with pytest.raises(ConfigError, match=r"^environment variable STARLIGHT_amqpListeners: "):
        load("", environ)
    assert load("", {**environ, "STARLIGHT_amqpAllowUnauthenticatedRemote": "true"})
