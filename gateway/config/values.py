"""Parsing and validation of one value: ``(spec, text) -> value``, by :class:`Kind`.

A parser raises :class:`InvalidValue` naming the problem; the loader turns it into a
:class:`ConfigError` naming the key and where the value came from.  Forms only: nothing here opens
key, certificate or store files (the TLS and auth layers do).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
import ssl
from collections.abc import Callable
from typing import Any, Final

from gateway.config.address import UNIX_SCHEME, Listener
from gateway.config.errors import InvalidValue, quoted
from gateway.config.keys import ALLOCATORS, UNIX_PEERS, ConfigKey, Kind, MetricsListener

# Value parsers: (spec, text) -> value, raising InvalidValue(problem) on bad input
# --------------------------------------------------------------------------------------------

WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::"})
_INT_RE: Final = re.compile(r"[+-]?[0-9]+")
_HOST_LABEL_RE: Final = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?")
_PULSAR_NAME_RE: Final = re.compile(r"[a-zA-Z0-9_=:.-]+")
_CIPHER_RE: Final = re.compile(r"[A-Za-z0-9_.+-]+")
# Numbers only: kombu (version_string_as_tuple) and the Java client parse the version.
_RABBITMQ_VERSION_RE: Final = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?")

_MECHANISMS: Final = ("PLAIN", "AMQPLAIN", "EXTERNAL")

# TLS version names as Java spells them, and the ssl flag telling whether OpenSSL has them.
_TLS_VERSIONS: Final = {
    "TLSV1.3": ("TLSv1.3", "HAS_TLSv1_3"),
    "TLSV1.2": ("TLSv1.2", "HAS_TLSv1_2"),
    "TLSV1.1": ("TLSv1.1", "HAS_TLSv1_1"),
    "TLSV1": ("TLSv1", "HAS_TLSv1"),
}

AUTH_PLUGINS: Final = {
    "": "",
    "org.apache.pulsar.client.impl.auth.AuthenticationToken": "token",
    "org.apache.pulsar.client.impl.auth.AuthenticationTls": "tls",
    "org.apache.pulsar.client.impl.auth.AuthenticationBasic": "basic",
    "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2": "oauth2",
    "token": "token",
    "tls": "tls",
    "basic": "basic",
    "oauth2": "oauth2",
}


def _got(spec: ConfigKey, text: str) -> str:
    return "" if spec.secret else f", got {quoted(text)}"


def _parse_string(spec: ConfigKey, text: str) -> str:
    return text


def _parse_int(spec: ConfigKey, text: str) -> int:
    lo, hi = spec.minimum, spec.maximum
    if lo is not None and hi is not None:
        wanted = f"an integer from {lo} to {hi}"
    elif lo is not None:
        wanted = f"an integer >= {lo}"
    else:
        wanted = "an integer"
    if not _INT_RE.fullmatch(text) or len(text) > 30:
        raise InvalidValue(f"must be {wanted}{_got(spec, text)}")
    value = int(text)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise InvalidValue(f"must be {wanted}{_got(spec, text)}")
    return value


def _parse_bool(spec: ConfigKey, text: str) -> bool:
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise InvalidValue(f"must be true or false{_got(spec, text)}")


def _split_list(text: str) -> list[str]:
    """Comma-separated items, trimmed; empty items (``a,,b``, a trailing comma) are ignored."""
    return [item.strip() for item in text.split(",") if item.strip()]


def _dedupe(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _parse_string_list(spec: ConfigKey, text: str) -> tuple[str, ...]:
    return _dedupe(_split_list(text))


def _parse_seconds_list(spec: ConfigKey, text: str) -> tuple[int, ...]:
    values: list[int] = []
    for item in _split_list(text):
        if not (item.isascii() and item.isdigit()) or int(item) < 1:
            raise InvalidValue(f"{quoted(item)} is not a whole number of seconds >= 1")
        values.append(int(item))
    if not values:
        raise InvalidValue("give at least one number of seconds")
    return tuple(sorted(set(values)))


def _check_host(host: str, what: str) -> str:
    """Validate a host name, IPv4 or IPv6 address (without brackets); return it."""
    if not host:
        raise InvalidValue(f"{what} has no host")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise InvalidValue(f"{what} has an invalid IPv6 address {quoted(host)}") from None
        return host
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or not all(
        len(label) <= 63 and _HOST_LABEL_RE.fullmatch(label) for label in labels
    ):
        raise InvalidValue(f"{what} has an invalid host name {quoted(host)}")
    return host


def _parse_port(text: str, what: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 5:
        raise InvalidValue(f"{what} has an invalid port {quoted(text)}")
    port = int(text)
    if not 1 <= port <= 65535:
        raise InvalidValue(f"{what} has port {port}, outside 1..65535")
    return port


def _split_host_port(text: str, what: str, default_port: int) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise InvalidValue(f"{what} has an unclosed '[' in {quoted(text)}")
        host, rest = text[1:end], text[end + 1 :]
        if not host or ":" not in host:
            raise InvalidValue(f"{what} has an invalid IPv6 address {quoted(host)}")
        if rest and not rest.startswith(":"):
            raise InvalidValue(f"{what} has unexpected text after ']' in {quoted(text)}")
        port_text = rest[1:] if rest else None
    elif text.count(":") > 1:
        raise InvalidValue(f"{what}: an IPv6 address must be written in brackets, e.g. [::1]:5672")
    elif ":" in text:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None
    _check_host(host, what)
    port = default_port if port_text is None else _parse_port(port_text, what)
    return host, port


_URL_RE: Final = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)", re.DOTALL)


def _parse_listener(item: str) -> Listener:
    what = f"listener {quoted(item)}"
    match = _URL_RE.fullmatch(item)
    if not match:
        raise InvalidValue(f"{what} is not of the form amqp[s]://<host>:<port>")
    scheme = match["scheme"].lower()
    if scheme == UNIX_SCHEME:
        return _parse_unix_listener(match["rest"], what)
    if scheme not in ("amqp", "amqps"):
        raise InvalidValue(
            f"{what} has scheme {quoted(match['scheme'])}; use amqp:// or amqps:// (or amqp+unix:///path)"
        )
    hostport = match["rest"]
    if hostport.endswith("/"):
        hostport = hostport[:-1]
    if any(c in hostport for c in "/?#@"):
        raise InvalidValue(f"{what} must be only amqp[s]://<host>:<port> (no path, user or query)")
    host, port = _split_host_port(hostport, what, 5671 if scheme == "amqps" else 5672)
    return Listener(scheme=scheme, host=host, port=port)


# Linux's sun_path is 108 bytes including the terminating NUL.
_UNIX_PATH_MAX: Final = 107


def _parse_unix_listener(path: str, what: str) -> Listener:
    """``amqp+unix:///absolute/path``: what follows ``//`` is the absolute path."""
    if not path.startswith("/") or path == "/":
        raise InvalidValue(f"{what} must be amqp+unix:///<absolute path of the socket file>")
    if path.endswith("/") or "\x00" in path or any(c.isspace() for c in path):
        raise InvalidValue(f"{what} has an invalid socket path {quoted(path)}")
    if len(os.fsencode(path)) > _UNIX_PATH_MAX:
        raise InvalidValue(f"{what}: the socket path is longer than {_UNIX_PATH_MAX} bytes")
    return Listener(scheme=UNIX_SCHEME, host="", port=0, path=path)


def _parse_listeners(spec: ConfigKey, text: str) -> tuple[Listener, ...]:
    items = _split_list(text)
    if not items:
        raise InvalidValue("must list at least one amqp:// or amqps:// listener")
    listeners: list[Listener] = []
    seen: dict[tuple[str, int, str], Listener] = {}
    for item in items:
        listener = _parse_listener(item)
        address = (listener.host, listener.port, listener.path)
        previous = seen.get(address)
        if previous is not None:
            raise InvalidValue(f"listeners {previous.url} and {listener.url} use the same address")
        seen[address] = listener
        listeners.append(listener)
    return tuple(listeners)


def _parse_networks(spec: ConfigKey, text: str) -> tuple[str, ...]:
    """CIDR networks in their canonical form (``10.1.2.3/8`` is refused: host bits set), and
    ``unix``."""
    result = []
    for item in _split_list(text):
        if item.lower() == UNIX_PEERS:
            result.append(UNIX_PEERS)
            continue
        try:
            network = ipaddress.ip_network(item, strict=True)
        except ValueError as error:
            raise InvalidValue(
                f"{quoted(item)} is not a CIDR network such as 10.0.0.0/8 or 127.0.0.1/32, "
                f"nor unix ({error})"
            ) from None
        result.append(str(network))
    return _dedupe(result)


def _parse_mechanisms(spec: ConfigKey, text: str) -> tuple[str, ...]:
    items = _split_list(text)
    if not items:
        raise InvalidValue(f"must list at least one of {', '.join(_MECHANISMS)}")
    result = []
    for item in items:
        name = item.upper()
        if name not in _MECHANISMS:
            raise InvalidValue(
                f"unknown mechanism {quoted(item)}; supported: {', '.join(_MECHANISMS)}"
            )
        result.append(name)
    return _dedupe(result)


def _parse_tls_protocols(spec: ConfigKey, text: str) -> tuple[str, ...]:
    result = []
    for item in _split_list(text):
        known = _TLS_VERSIONS.get(item.upper())
        if known is None:
            supported = [name for name, flag in _TLS_VERSIONS.values() if getattr(ssl, flag)]
            raise InvalidValue(
                f"unsupported TLS protocol {quoted(item)}; supported: {', '.join(supported)}"
            )
        name, flag = known
        if not getattr(ssl, flag):
            raise InvalidValue(f"{name} is not supported by this Python's ssl module (OpenSSL)")
        result.append(name)
    return _dedupe(result)


def _parse_tls_ciphers(spec: ConfigKey, text: str) -> tuple[str, ...]:
    items = _split_list(text)
    for item in items:
        if not _CIPHER_RE.fullmatch(item):
            raise InvalidValue(f"invalid cipher suite name {quoted(item)}")
    return _dedupe(items)


def _parse_store_type(spec: ConfigKey, text: str) -> str:
    upper = text.upper()
    if upper in ("PKCS12", ""):
        # Empty means the default; Java's KeyStore type names are case-insensitive.
        return "PKCS12"
    if upper == "JKS":
        raise InvalidValue(
            "JKS key stores cannot be read from Python; convert the store to PKCS12 with "
            "'keytool -importkeystore -srckeystore store.jks -destkeystore store.p12 "
            "-deststoretype PKCS12' and set this key to PKCS12"
        )
    raise InvalidValue(f"unsupported key store type {quoted(text)}; only PKCS12 is supported")


def _parse_tls_provider(spec: ConfigKey, text: str) -> str:
    canonical = {"": "", "JDK": "JDK", "OPENSSL": "OpenSSL"}.get(text.upper())
    if canonical is None:
        raise InvalidValue(
            f"{quoted(text)} is a Java security provider; the Python gateway always uses the "
            "OpenSSL library of Python's ssl module (accepted: empty, JDK, OpenSSL)"
        )
    return canonical


_DATA_URL_RE: Final = re.compile(r"data:[^,;]*;base64,(?P<data>.*)", re.DOTALL)


def _parse_token_key(spec: ConfigKey, text: str) -> str:
    if not text:
        return text
    forms = "use data:;base64,<base64 key> or file:///absolute/path/to/key"
    if text.startswith("data:"):
        match = _DATA_URL_RE.fullmatch(text)
        if not match:
            raise InvalidValue(f"a data: URL must be base64-encoded; {forms}")
        try:
            decoded = base64.b64decode(match["data"], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidValue(f"the data: URL does not hold valid base64; {forms}") from None
        if not decoded:
            raise InvalidValue(f"the data: URL holds an empty key; {forms}")
        return text
    if text.startswith("file:"):
        if not text.startswith("file:///") or len(text) == len("file:///"):
            raise InvalidValue(f"a file URL must be file:///<absolute path>{_got(spec, text)}")
        return text
    raise InvalidValue(f"unsupported key form{_got(spec, text)}; {forms}")


def _parse_service_hosts(spec: ConfigKey, text: str, schemes: dict[str, int]) -> str:
    """``scheme://host[:port][,host[:port]...][/path]``, returned with a lower-case scheme."""
    wanted = " or ".join(f"{scheme}://" for scheme in schemes)
    match = _URL_RE.fullmatch(text)
    if not match:
        raise InvalidValue(f"must be a {wanted} URL{_got(spec, text)}")
    scheme = match["scheme"].lower()
    if scheme not in schemes:
        raise InvalidValue(f"must be a {wanted} URL, not {quoted(match['scheme'] + '://')}")
    hosts = match["rest"].partition("/")[0]
    if any(c in match["rest"] for c in "?#@") or any(c.isspace() for c in match["rest"]):
        raise InvalidValue(
            f"must be {wanted}host:port (no user, query or spaces){_got(spec, text)}"
        )
    if not hosts.strip(","):
        raise InvalidValue(f"has no host{_got(spec, text)}")
    for hostport in hosts.split(","):
        _split_host_port(hostport, f"address {quoted(hostport)}", schemes[scheme])
    # Schemes are case-insensitive (RFC 3986); hand the clients the lower-case form.
    return f"{scheme}://{match['rest']}"


def _parse_pulsar_url(spec: ConfigKey, text: str) -> str:
    url = _parse_service_hosts(spec, text, {"pulsar": 6650, "pulsar+ssl": 6651})
    if "/" in url.split("://", 1)[1].rstrip("/"):
        raise InvalidValue(f"a pulsar:// URL has no path{_got(spec, text)}")
    return url


def _parse_web_url(spec: ConfigKey, text: str) -> str:
    return _parse_service_hosts(spec, text, {"http": 80, "https": 443})


def _parse_zookeeper(spec: ConfigKey, text: str) -> str:
    servers = text
    if servers.startswith("zk:"):
        servers = servers[3:]
        if servers.startswith("//"):
            servers = servers[2:]
    elif _URL_RE.fullmatch(servers) or re.match(r"(etcd|rocksdb|memory|metadata-store):", text):
        raise InvalidValue(
            f"only a ZooKeeper connection string (host:port,...) is supported{_got(spec, text)}"
        )
    hosts, slash, chroot = servers.partition("/")
    if slash and (not chroot or chroot.endswith("/") or "//" in chroot):
        raise InvalidValue(f"invalid chroot path {quoted('/' + chroot)}")
    if any(c.isspace() for c in servers):
        raise InvalidValue(f"must not contain spaces{_got(spec, text)}")
    if not hosts.strip(","):
        raise InvalidValue(f"has no host{_got(spec, text)}")
    for hostport in _split_list(hosts):
        _split_host_port(hostport, f"server {quoted(hostport)}", 2181)
    return servers


def _parse_pulsar_name(spec: ConfigKey, text: str) -> str:
    if not _PULSAR_NAME_RE.fullmatch(text):
        raise InvalidValue(
            "must be a non-empty Pulsar name (letters, digits and _ - = : .)" + _got(spec, text)
        )
    return text


def _parse_host(spec: ConfigKey, text: str) -> str:
    if text.startswith("[") and text.endswith("]"):
        host = text[1:-1]
        if ":" not in host:
            raise InvalidValue(f"the address has an invalid IPv6 address {quoted(host)}")
        _check_host(host, "the address")
    elif text:
        _check_host(text, "the address")
    return text


def _parse_auth_plugin(spec: ConfigKey, text: str) -> str:
    if text not in AUTH_PLUGINS:
        raise InvalidValue(
            f"unsupported plugin {quoted(text)}; supported: AuthenticationToken, "
            "AuthenticationTls, AuthenticationBasic, AuthenticationOAuth2 (full Java class "
            "names) or token, tls, basic, oauth2"
        )
    return text


def _parse_metrics_url(spec: ConfigKey, text: str) -> MetricsListener | None:
    if not text:
        return None
    what = f"{quoted(text)}"
    match = _URL_RE.fullmatch(text)
    if not match or match["scheme"].lower() != "http":
        raise InvalidValue(f"{what} is not of the form http://<host>:<port> (or empty to disable)")
    hostport = match["rest"].rstrip("/")
    if any(c in hostport for c in "/?#@"):
        raise InvalidValue(f"{what} must be only http://<host>:<port> (no path, user or query)")
    # Port 0 is allowed here (a free port), unlike the AMQP listeners.
    if hostport.endswith(":0"):
        host, _ = _split_host_port(hostport[:-2], what, 15692)
        return MetricsListener(host, 0)
    host, port = _split_host_port(hostport, what, 15692)
    return MetricsListener(host, port)


def _parse_management_url(spec: ConfigKey, text: str) -> MetricsListener | None:
    if not text:
        return None
    what = quoted(text)
    match = _URL_RE.fullmatch(text)
    scheme = match["scheme"].lower() if match else ""
    if not match or scheme not in ("http", "https"):
        raise InvalidValue(
            f"{what} is not of the form http://<host>:<port> or https://<host>:<port> "
            "(or empty to disable)"
        )
    hostport = match["rest"].rstrip("/")
    if any(c in hostport for c in "/?#@"):
        raise InvalidValue(f"{what} must be only {scheme}://<host>:<port> (no path, user or query)")
    if hostport.endswith(":0"):
        host, _ = _split_host_port(hostport[:-2], what, 15672)
        return MetricsListener(host, 0, scheme)
    host, port = _split_host_port(hostport, what, 15672)
    return MetricsListener(host, port, scheme)


_TOPIC_RE: Final = re.compile(r"persistent://([^/\s]+)/([^/\s]+)/([^/\s]+)")


def _parse_topic(spec: ConfigKey, text: str) -> str:
    match = _TOPIC_RE.fullmatch(text)
    if not match or not all(_PULSAR_NAME_RE.fullmatch(part) for part in match.groups()):
        raise InvalidValue(
            "must be persistent://<tenant>/<namespace>/<topic> (Pulsar names: letters, digits "
            "and _ - = : .)" + _got(spec, text)
        )
    return text


def _parse_allocator(spec: ConfigKey, text: str) -> str:
    choice = text.lower()
    if choice not in ALLOCATORS:
        raise InvalidValue(f"must be one of {', '.join(ALLOCATORS)}" + _got(spec, text))
    return choice


def _parse_rabbitmq_version(spec: ConfigKey, text: str) -> str:
    if not _RABBITMQ_VERSION_RE.fullmatch(text):
        raise InvalidValue(
            "must be a RabbitMQ version such as 3.13.7 (numbers only: clients parse it)"
            + _got(spec, text)
        )
    return text


PARSERS: Final[dict[Kind, Callable[[ConfigKey, str], Any]]] = {
    Kind.STRING: _parse_string,
    Kind.HOST: _parse_host,
    Kind.PULSAR_NAME: _parse_pulsar_name,
    Kind.INT: _parse_int,
    Kind.BOOL: _parse_bool,
    Kind.STRING_LIST: _parse_string_list,
    Kind.LISTENERS: _parse_listeners,
    Kind.NETWORKS: _parse_networks,
    Kind.MECHANISMS: _parse_mechanisms,
    Kind.TLS_PROTOCOLS: _parse_tls_protocols,
    Kind.TLS_CIPHERS: _parse_tls_ciphers,
    Kind.STORE_TYPE: _parse_store_type,
    Kind.TLS_PROVIDER: _parse_tls_provider,
    Kind.TOKEN_KEY: _parse_token_key,
    Kind.PULSAR_URL: _parse_pulsar_url,
    Kind.WEB_URL: _parse_web_url,
    Kind.ZOOKEEPER: _parse_zookeeper,
    Kind.AUTH_PLUGIN: _parse_auth_plugin,
    Kind.SECONDS_LIST: _parse_seconds_list,
    Kind.METRICS_URL: _parse_metrics_url,
    Kind.MANAGEMENT_URL: _parse_management_url,
    Kind.TOPIC: _parse_topic,
    Kind.ALLOCATOR: _parse_allocator,
    Kind.RABBITMQ_VERSION: _parse_rabbitmq_version,
}


# --------------------------------------------------------------------------------------------
# The file format and the environment
