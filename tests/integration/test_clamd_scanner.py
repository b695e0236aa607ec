"""The INSTREAM client against a real clamd, over both transports: verdicts, a file larger than one chunk, PING,
and a stopped daemon reported as unavailable (never as clean)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.gateway.antivirus import CHUNK_BYTES, AntivirusUnavailableError, ClamdScanner
from berth.testing.clamav import EICAR, EICAR_SIGNATURE, ClamdServer

pytestmark = pytest.mark.clamav


@pytest.fixture
def clamd(tmp_path: Path) -> Iterator[ClamdServer]:
    with ClamdServer(tmp_path) as server:
        yield server


@pytest.mark.parametrize("transport", ["unix", "tcp"])
async def test_verdicts_over_both_transports(clamd: ClamdServer, transport: str) -> None:
    scanner = ClamdScanner(clamd.unix_address if transport == "unix" else clamd.tcp_address)
    assert await scanner.ping()
    assert (await scanner.scan(EICAR)).signature == EICAR_SIGNATURE
    assert not (await scanner.scan(b"")).infected
    big = bytes(range(256)) * (3 * CHUNK_BYTES // 256 + 7)  # several chunks and a partial one
    assert not (await scanner.scan(big)).infected


async def test_a_stopped_daemon_is_unavailable_not_clean(clamd: ClamdServer) -> None:
    scanner = ClamdScanner(clamd.unix_address, timeout_s=5)
    clamd.stop()
    assert not await scanner.ping()
    with pytest.raises(AntivirusUnavailableError, match="unreachable"):
        await scanner.scan(EICAR)
    with pytest.raises(AntivirusUnavailableError, match="unreachable"):
        await ClamdScanner(clamd.tcp_address, timeout_s=5).scan(EICAR)
