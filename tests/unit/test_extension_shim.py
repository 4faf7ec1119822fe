"""What the Java proxy extension (extension_shim/) takes from the Python side stays in step."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import gateway

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "extension_shim"
KEYS = SHIM / "src/main/resources/io/starlight/rabbitmq/proxy/gateway-keys.txt"

sys.path.insert(0, str(REPO / "scripts"))
from config_table import render_key_list  # noqa: E402


def test_the_extension_knows_every_gateway_key() -> None:
    # The extension passes these keys, and only these, from proxy.conf to the gateway.
    assert KEYS.read_text() == render_key_list(), (
        "extension_shim's key list drifted: run .venv/bin/python scripts/config_table.py --keys "
        f"> {KEYS.relative_to(REPO)}"
    )


def test_the_nar_has_the_gateways_version() -> None:
    pom = (SHIM / "pom.xml").read_text()
    version = re.search(
        r"<artifactId>starlight-rabbitmq</artifactId>\s*(?:<!--.*?-->\s*)?<version>([^<]+)</version>",
        pom,
        re.S,
    )
    assert version is not None
    assert version.group(1) == gateway.__version__


def test_the_extension_is_named_rabbitmq() -> None:
    # reference/002: proxyExtensions=rabbitmq
    descriptor = SHIM / "src/main/resources/META-INF/services/pulsar-proxy-extension.yml"
    assert re.search(r"^name: rabbitmq$", descriptor.read_text(), re.M)


def test_every_key_of_the_extension_is_documented() -> None:
    # ShimSettings.KEYS (the keys proxy.conf may give the extension, the rest refused by their
    # prefix) against docs/proxy-extension.md's table of them, both ways.
    source = (SHIM / "src/main/java/io/starlight/rabbitmq/proxy/ShimSettings.java").read_text()
    constants = dict(re.findall(r'static final String (\w+) = "(\w+)";', source))
    listed = re.search(r"List<String> KEYS =\s*List\.of\(([^)]*)\)", source)
    assert listed is not None
    keys = {constants[name.strip()] for name in listed.group(1).split(",")}
    assert "amqpGatewayMode" in keys
    docs = (REPO / "docs" / "proxy-extension.md").read_text()
    table = docs.split("## The extension's keys", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert documented == keys
