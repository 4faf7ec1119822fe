"""Loading: the ``key=value`` file, ``STARLIGHT_<key>`` overrides, and the rules across keys."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gateway.config.errors import ConfigError, InvalidValue, quoted
from gateway.config.keys import ENV_PREFIX
from gateway.config.schema import KEYS_BY_NAME, SCHEMA, GatewayConfig
from gateway.config.values import PARSERS

# --------------------------------------------------------------------------------------------
# The file format and the environment
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Raw:
    value: str
    where: str  # "path:line", "environment variable STARLIGHT_x" or "default"
    line: int = 0


def _unknown_key(key: str, where: str, *, prefix: str = "") -> ConfigError:
    """'unknown key' with a suggestion; *prefix* is prepended to suggested names (env vars)."""
    names = list(KEYS_BY_NAME)
    hint = ""
    folded = {name.lower(): name for name in names}
    if key.lower() in folded:
        hint = f"; did you mean {prefix}{folded[key.lower()]}? (keys are case-sensitive)"
    else:
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.75)
        if close:
            hint = f"; did you mean {prefix}{close[0]}?"
    return ConfigError(f"{where}: unknown key {quoted(key)}{hint}", key=prefix + key)


_LINE_BREAK_RE: Final = re.compile(r"\r\n|\r|\n")


def _parse_properties(text: str, source: str) -> dict[str, _Raw]:
    """Java-properties style ``key=value`` lines (see docs/configuration.md for the subset)."""
    text = text.removeprefix("\ufeff")
    lines = _LINE_BREAK_RE.split(text)
    entries: dict[str, _Raw] = {}
    index = 0
    while index < len(lines):
        number = index + 1
        logical = lines[index].strip()
        index += 1
        if not logical or logical[0] in "#!":
            continue
        # A line ending in an odd number of backslashes continues on the next one (Java rule).
        while (len(logical) - len(logical.rstrip("\\"))) % 2 == 1:
            logical = logical[:-1]
            if index >= len(lines):
                break
            logical += lines[index].strip()
            index += 1
        where = f"{source}:{number}"
        key, equals, value = logical.partition("=")
        key, value = key.strip(), value.strip()
        if not equals:
            raise ConfigError(f"{where}: expected key=value, found no '=' on this line")
        if not key:
            raise ConfigError(f"{where}: expected key=value, found no key before '='")
        if key not in KEYS_BY_NAME:
            raise _unknown_key(key, where)
        previous = entries.get(key)
        if previous is not None:
            raise ConfigError(
                f"{where}: duplicate key {key} (already set on line {previous.line}); "
                "set each key once",
                key=key,
            )
        entries[key] = _Raw(value, where, number)
    return entries


def _environment_overrides(environ: Mapping[str, str]) -> dict[str, _Raw]:
    entries: dict[str, _Raw] = {}
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX):
            continue
        key = variable[len(ENV_PREFIX) :]
        where = f"environment variable {variable}"
        if key not in KEYS_BY_NAME:
            raise _unknown_key(key, where, prefix=ENV_PREFIX)
        entries[key] = _Raw(environ[variable].strip(), where)
    return entries


def _read_file(path: str | os.PathLike[str]) -> str:
    shown = os.fsdecode(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        raise ConfigError(f"{shown}: cannot read configuration file: {reason}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ConfigError(f"{shown}:{line}: configuration file is not valid UTF-8") from None


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def load_config(
    path: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Read the configuration file at *path* (None: no file), apply ``STARLIGHT_<key>``
    variables from *environ* (None: ``os.environ``), validate, and return the configuration.

    Raises ConfigError, with a one-line message, for anything wrong.
    """
    text = _read_file(path) if path is not None else ""
    source = os.fsdecode(path) if path is not None else "<no file>"
    return config_from_text(text, environ, source=source)


def config_from_text(
    text: str, environ: Mapping[str, str] | None = None, *, source: str = "<string>"
) -> GatewayConfig:
    """Like :func:`load_config` for the contents of a file; *source* names it in errors."""
    entries = _parse_properties(text, source)
    entries.update(_environment_overrides(os.environ if environ is None else environ))

    missing = [
        spec.name
        for spec in SCHEMA
        if spec.required and (spec.name not in entries or not entries[spec.name].value)
    ]
    if missing:
        where = "" if source.startswith("<") else f" in {source}"
        raise ConfigError(
            f"missing required key{'s' if len(missing) > 1 else ''} {', '.join(missing)}: "
            f"set {'them' if len(missing) > 1 else 'it'}{where} or with "
            f"{ENV_PREFIX}{missing[0]}=...",
            key=missing[0],
        )

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in SCHEMA:
        raw = entries.get(spec.name) or _Raw(spec.default, "default")
        try:
            values[spec.name] = PARSERS[spec.kind](spec, raw.value)
        except InvalidValue as problem:
            raise ConfigError(f"{raw.where}: {spec.name}: {problem}", key=spec.name) from None
        sources[spec.name] = raw.where
    config = GatewayConfig(**values)
    _check_cross_key(config, sources)
    return config


def _check_cross_key(config: GatewayConfig, sources: Mapping[str, str]) -> None:
    """Rules that involve several keys. Each error names the key it is reported on first."""

    def fail(key: str, problem: str) -> ConfigError:
        where = sources.get(key, "default")
        prefix = "" if where == "default" else f"{where}: "
        return ConfigError(f"{prefix}{key}: {problem}", key=key)

    c = config
    if c.tlsEnabledWithKeyStore and not c.tlsKeyStore:
        raise fail("tlsEnabledWithKeyStore", "is true but tlsKeyStore is empty")
    if c.brokerClientTlsEnabledWithKeyStore and not c.brokerClientTlsTrustStore:
        raise fail(
            "brokerClientTlsEnabledWithKeyStore", "is true but brokerClientTlsTrustStore is empty"
        )

    has_pem_cert = bool(c.tlsCertificateFilePath and c.tlsKeyFilePath)
    for listener in c.tls_listeners:
        if not (has_pem_cert or c.tlsEnabledWithKeyStore):
            raise fail(
                "amqpListeners",
                f"listener {listener.url} needs a certificate: set tlsCertificateFilePath and "
                "tlsKeyFilePath, or tlsEnabledWithKeyStore=true and tlsKeyStore",
            )
    management = c.managementListener
    https = management is not None and management.scheme == "https"
    if https and not (has_pem_cert or c.tlsEnabledWithKeyStore):
        raise fail(
            "managementListener",
            f"{c.managementListener} needs a certificate: set tlsCertificateFilePath and "
            "tlsKeyFilePath, or tlsEnabledWithKeyStore=true and tlsKeyStore",
        )
    server_trust = bool(c.tlsTrustCertsFilePath or (c.tlsEnabledWithKeyStore and c.tlsTrustStore))
    if "EXTERNAL" in c.amqpAuthenticationMechanisms:
        if not c.tls_listeners:
            raise fail(
                "amqpAuthenticationMechanisms",
                "EXTERNAL needs an amqps:// listener in amqpListeners (it authenticates with "
                "the TLS client certificate)",
            )
        if not server_trust:
            raise fail(
                "amqpAuthenticationMechanisms",
                "EXTERNAL needs trusted CAs to verify client certificates: set "
                "tlsTrustCertsFilePath, or tlsEnabledWithKeyStore=true and tlsTrustStore",
            )
    if c.tlsRequireTrustedClientCertOnConnect and not server_trust:
        raise fail(
            "tlsRequireTrustedClientCertOnConnect",
            "is true but no trusted CAs are configured: set tlsTrustCertsFilePath, or "
            "tlsEnabledWithKeyStore=true and tlsTrustStore",
        )

    if c.tokenSecretKey and c.tokenPublicKey:
        raise fail("tokenSecretKey", "set only one of tokenSecretKey and tokenPublicKey")
    token_mechanisms = [m for m in c.amqpAuthenticationMechanisms if m in ("PLAIN", "AMQPLAIN")]
    if c.authenticationEnabled and token_mechanisms and not (c.tokenSecretKey or c.tokenPublicKey):
        raise fail(
            "authenticationEnabled",
            f"is true and amqpAuthenticationMechanisms offers {token_mechanisms[0]}, which "
            "validates JWTs: set tokenSecretKey or tokenPublicKey",
        )
    if c.tokenAudienceClaim and not c.tokenAudience:
        raise fail("tokenAudienceClaim", "is set but tokenAudience is empty")
    if c.authorizationEnabled and not c.authenticationEnabled:
        raise fail("authorizationEnabled", "is true but authenticationEnabled is false")
    open_remote = c.open_remote_listeners
    if open_remote and not c.amqpAllowUnauthenticatedRemote:
        # The reference's default lets any credentials in; RabbitMQ's lets its default user
        # in from loopback only (its docs, "Access Control": loopback_users). So an open
        # gateway that other machines reach is a decision to write down, not a default.
        raise fail(
            "amqpListeners" if open_remote[0] in c.amqpListeners else "managementListener",
            f"{open_remote[0].url} is reachable from other machines and authenticationEnabled "
            "is false, which lets anyone in with any credentials: set authenticationEnabled="
            "true, listen on 127.0.0.1 only, or set amqpAllowUnauthenticatedRemote=true",
        )

    if c.tlsEnabledWithBroker:
        if not c.brokerServiceURL.startswith("pulsar+ssl://"):
            raise fail(
                "brokerServiceURL", "must be a pulsar+ssl:// URL when tlsEnabledWithBroker=true"
            )
        if not c.brokerWebServiceURL.startswith("https://"):
            raise fail(
                "brokerWebServiceURL", "must be an https:// URL when tlsEnabledWithBroker=true"
            )
    if c.brokerClientAuthenticationPlugin:
        if not c.effective_broker_client_authentication_parameters:
            raise fail(
                "brokerClientAuthenticationPlugin",
                "is set but brokerClientAuthenticationParameters (or "
                "amqpBrokerClientAuthenticationParameters) is empty",
            )
    elif c.brokerClientAuthenticationParameters or c.amqpBrokerClientAuthenticationParameters:
        key = (
            "amqpBrokerClientAuthenticationParameters"
            if c.amqpBrokerClientAuthenticationParameters
            else "brokerClientAuthenticationParameters"
        )
        raise fail(key, "is set but brokerClientAuthenticationPlugin is empty")
