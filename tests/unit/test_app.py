"""``server_settings``: what the shell is given is what the configuration derives."""

from __future__ import annotations

from gateway.app import fleet_summary, server_settings
from gateway.config import config_from_text
from gateway.server.address import Listener
from gateway.server.settings import ProxyTrust

REQUIRED = (
    "brokerServiceURL=pulsar://127.0.0.1:6650\n"
    "brokerWebServiceURL=http://127.0.0.1:8080\n"
    "configurationStoreServers=127.0.0.1:2181\n"
)


def test_server_settings_carry_the_derived_values() -> None:
    config = config_from_text(
        REQUIRED + "amqpListeners=amqp://[::1]:5673,amqp+unix:///tmp/gw.sock\n"
        "amqpSessionCountLimit=2047\namqpNetworkBufferSize=131072\namqpHeartbeatDelay=30\n"
        "amqpHeartbeatTimeoutFactor=3\namqpMaxMessageSize=1048576\n"
        "amqpAuthenticationMechanisms=PLAIN,AMQPLAIN\n"
        "amqpConnectionCloseTimeout=1500\namqpHandshakeTimeoutMs=2500\n"
        "amqpDebugBinaryDataLength=16\namqpProxyProtocolTrustedNetworks=10.0.0.0/8,unix\n"
        "amqpServerProduct=Starlight for RabbitMQ\namqpServerVersion=4.1.0\n",
        {},
        source="test.conf",
    )
    settings = server_settings(config)
    # The configuration's listeners, unchanged: the shell binds the type the key parses to.
    assert settings.listeners == (
        Listener("amqp", "::1", 5673),
        Listener("amqp+unix", "", 0, "/tmp/gw.sock"),
    )
    assert [str(listener) for listener in settings.listeners] == [
        "amqp://[::1]:5673",
        "amqp+unix:///tmp/gw.sock",
    ]
    connection = settings.connection
    assert (connection.channel_max, connection.frame_max, connection.heartbeat) == (
        2047,
        131072,
        30,
    )
    assert connection.heartbeat_timeout_factor == 3
    assert connection.max_message_size == 1048576
    assert connection.mechanisms == ("PLAIN", "AMQPLAIN")  # config.offered_mechanisms
    assert (connection.product, connection.version) == ("Starlight for RabbitMQ", "4.1.0")
    assert settings.close_timeout == 1.5  # milliseconds in the file, seconds in the shell
    assert settings.handshake_timeout == 2.5
    assert settings.debug_binary_length == 16
    assert settings.tls is None  # no amqps listener
    assert settings.proxy_trust == ProxyTrust.parse(("10.0.0.0/8", "unix"))


def test_connection_start_offers_amqplain_beside_plain_without_authentication() -> None:
    settings = server_settings(config_from_text(REQUIRED, {}, source="test.conf"))
    assert settings.connection.mechanisms == ("PLAIN", "AMQPLAIN")
    assert settings.connection.channel_max == 256  # amqpSessionCountLimit: the reference's


def test_the_fleet_line_names_the_zookeeper_path_and_the_namespaces() -> None:
    plain = fleet_summary(config_from_text(REQUIRED, {}, source="test.conf"))
    assert plain.startswith(
        "fleet: metadata in ZooKeeper 127.0.0.1:2181 at /starlight-rabbitmq (chroot none); "
    )
    assert "pulsar://127.0.0.1:6650: / = public/default, <name> = public/<name>," in plain
    assert "amqpClusterName 'starlight-rabbitmq' is a label only" in plain
    chrooted = fleet_summary(
        config_from_text(
            REQUIRED.replace("2181", "2181,zk2:2181/teams/a")
            + "amqpDefaultTenant=acme\namqpMapShortVhostToTenant=true\n",
            {},
            source="test.conf",
        )
    )
    assert "ZooKeeper 127.0.0.1:2181,zk2:2181 at /teams/a/starlight-rabbitmq (chroot /teams/a)" in (
        chrooted
    )
    assert "/ = acme/default, <name> = <name>/default," in chrooted
    assert len(chrooted.splitlines()) == 1
