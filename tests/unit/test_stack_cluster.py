"""scripts/stack_cluster.py without starting anything: the URLs clients get, the config each
JVM gets, and the command line's answer for a cluster that does not run (the cluster itself
runs in tests/faults/test_pulsar_cluster.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.stack_script import load_cluster_module, load_stack_module

PORTS = [2301, 3301, 3302, 6701, 6702, 8101, 8102]


def _conf(path: Path) -> dict[str, str]:
    """key=value lines of a generated config (comments and blank lines skipped)."""
    pairs = (
        line.split("=", 1)
        for line in path.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    return {key: value for key, value in pairs}


def test_clients_are_given_every_broker(tmp_path: Path) -> None:
    cluster = load_cluster_module().new_cluster(tmp_path, PORTS)
    assert cluster.broker_url == "pulsar://127.0.0.1:6701,127.0.0.1:6702"
    assert cluster.web_url == "http://127.0.0.1:8101,127.0.0.1:8102"
    assert cluster.zookeeper == "127.0.0.1:2301"
    assert [server.name for server in cluster.servers] == [
        "zookeeper",
        "bookie-1",
        "bookie-2",
        "broker-1",
        "broker-2",
    ]
    assert cluster.state_dir() == tmp_path


def test_each_server_gets_its_own_ports_folders_and_main_class(tmp_path: Path) -> None:
    module = load_cluster_module()
    cluster = module.new_cluster(tmp_path, PORTS, session_timeout_ms=7000)
    commands = module._write_configs(tmp_path, cluster, ["/m2/pulsar-broker-4.0.8.jar"])
    conf = tmp_path / "conf"

    zookeeper = _conf(conf / "zookeeper.conf")
    assert zookeeper["clientPort"] == "2301"
    assert zookeeper["clientPortAddress"] == "127.0.0.1"
    assert zookeeper["admin.enableServer"] == "false"
    assert zookeeper["dataDir"] == str(tmp_path / "data" / "zookeeper")

    for number, port in ((1, 3301), (2, 3302)):
        bookie = _conf(conf / f"bookie-{number}.conf")
        assert bookie["bookiePort"] == str(port)
        assert bookie["metadataServiceUri"] == "zk+hierarchical://127.0.0.1:2301/ledgers"
        assert bookie["zkTimeout"] == "7000"
        assert bookie["journalDirectories"] == str(tmp_path / "data" / f"bookie-{number}/journal")

    for number, (port, web) in enumerate(((6701, 8101), (6702, 8102)), 1):
        broker = _conf(conf / f"broker-{number}.conf")
        assert (broker["brokerServicePort"], broker["webServicePort"]) == (str(port), str(web))
        assert broker["metadataStoreUrl"] == broker["configurationMetadataStoreUrl"]
        assert broker["metadataStoreUrl"] == "zk:127.0.0.1:2301"
        assert broker["metadataStoreSessionTimeoutMillis"] == "7000"
        assert broker["clusterName"] == "cluster"
        # Every entry on both bookies, acknowledged by both (docs/local-stack.md).
        quorum = [broker[f"managedLedgerDefault{k}"] for k in ("EnsembleSize", "WriteQuorum")]
        assert [*quorum, broker["managedLedgerDefaultAckQuorum"]] == ["2", "2", "2"]
        assert broker["loadManagerClassName"].endswith("ModularLoadManagerImpl")

    mains = {name: command[1] for name, command in commands.items()}
    assert mains == {
        "zookeeper": "org.apache.zookeeper.server.ZooKeeperServerMain",
        "bookie-1": "org.apache.bookkeeper.server.Main",
        "bookie-2": "org.apache.bookkeeper.server.Main",
        "broker-1": "org.apache.pulsar.PulsarBrokerStarter",
        "broker-2": "org.apache.pulsar.PulsarBrokerStarter",
    }
    # The JVM argument file carries the classpath and this server's own temporary folder.
    args = (conf / "broker-2.jvm.args").read_text()
    assert "/m2/pulsar-broker-4.0.8.jar" in args
    assert f"-Djava.io.tmpdir={tmp_path / 'tmp' / 'broker-2'}" in args


def test_status_of_a_cluster_that_never_ran_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STACK_CLUSTER_DIR", str(tmp_path))
    assert load_stack_module().main(["status", "--profile", "cluster"]) == 3
    assert "down: zookeeper, bookie-1, bookie-2, broker-1, broker-2 not running" in (
        capsys.readouterr().out
    )
