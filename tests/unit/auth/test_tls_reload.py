"""Certificates replaced on disk are used for new connections, checked at most every N s."""

from __future__ import annotations

import shutil

import pytest

from gateway.auth.tls_context import TlsSettings
from gateway.auth.tls_reload import ReloadingContext
from tests.support.pki import Pki, make_pki
from tests.unit.auth.tls_pair import handshake


@pytest.fixture
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def install(pki: Pki, stem: str) -> TlsSettings:
    """Copy the server certificate and key to the 'live' paths the settings name."""
    live = pki.directory / "live"
    live.mkdir(exist_ok=True)
    shutil.copy(pki.server.cert_path, live / f"{stem}.crt")
    shutil.copy(pki.server.key_path, live / f"{stem}.key")
    return TlsSettings(
        certificate_file=str(live / f"{stem}.crt"),
        key_file=str(live / f"{stem}.key"),
        refresh_interval=10.0,
    )


def replace_with_new_certificate(pki: Pki, settings: TlsSettings) -> int:
    """Write a freshly issued server certificate over the live files; its serial."""
    fresh = pki.ca.issue("localhost", "fresh", server=True)
    # Written to the side and renamed in, as cert-manager and most tools do.
    for source, target in (
        (fresh.cert_path, settings.certificate_file),
        (fresh.key_path, settings.key_file),
    ):
        staging = f"{target}.new"
        shutil.copy(source, staging)
        shutil.move(staging, target)
    return fresh.serial


async def test_checked_only_after_the_interval(pki: Pki) -> None:
    settings = install(pki, "server")
    source = ReloadingContext(settings, now=100.0)
    first = source.current(100.0)
    serial = replace_with_new_certificate(pki, settings)
    assert source.current(109.9) is first  # not looked at yet
    second = source.current(110.0)
    assert second is not first
    assert source.reloads == 1
    assert (await handshake(second, pki.client_context())).server_serial == serial
    assert source.current(125.0) is second  # unchanged files: same context


async def test_interval_zero_checks_on_every_connection(pki: Pki) -> None:
    settings = TlsSettings(**{**install(pki, "server").__dict__, "refresh_interval": 0.0})
    source = ReloadingContext(settings, now=0.0)
    first = source.current(0.0)
    assert source.current(0.0) is first
    serial = replace_with_new_certificate(pki, settings)
    second = source.current(0.0)
    assert (await handshake(second, pki.client_context())).server_serial == serial


async def test_a_broken_replacement_keeps_the_previous_certificate(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    settings = install(pki, "server")
    source = ReloadingContext(settings, now=0.0)
    first = source.current(0.0)
    # The key of another certificate: the pair does not load.
    shutil.copy(pki.alice.key_path, settings.key_file)
    assert source.current(10.0) is first
    assert source.current(20.0) is first
    warnings = [r for r in caplog.records if "cannot be loaded" in r.getMessage()]
    assert len(warnings) == 1, "one line per broken change, not one per check"
    assert "\n" not in warnings[0].getMessage()
    assert (await handshake(first, pki.client_context())).server_serial == pki.server.serial
    # Fixed: picked up at the next check.
    shutil.copy(pki.server.key_path, settings.key_file)
    assert source.current(30.0) is not first
    assert source.reloads == 1


def test_a_missing_file_keeps_the_previous_certificate(pki: Pki) -> None:
    settings = install(pki, "server")
    source = ReloadingContext(settings, now=0.0)
    first = source.current(0.0)
    (pki.directory / "live" / "server.crt").unlink()
    assert source.current(10.0) is first
