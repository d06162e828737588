"""InfiniBand counters from a checked-in sysfs tree (tests/data/sys/class/infiniband)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpuscope.exporter.sources.base import BackendUnavailable
from gpuscope.exporter.sources.infiniband import InfinibandSource

ROOT = Path(__file__).resolve().parent.parent / "data" / "sys" / "class" / "infiniband"


def by_port(source: InfinibandSource) -> dict[tuple[str, int], dict[str, float]]:
    return {(r.port.device, r.port.port): r.values for r in source.read_ports()}


def test_reads_every_port_with_data_counters_times_four() -> None:
    ports = by_port(InfinibandSource(ROOT))
    assert set(ports) == {("mlx5_0", 1), ("mlx5_0", 2), ("mlx5_1", 1)}
    active = ports[("mlx5_0", 1)]
    assert active["xmit_bytes"] == 2_812_345_678_901 * 4
    assert active["rcv_bytes"] == 2_798_765_432_109 * 4
    assert active["xmit_wait"] == 1_234_567
    assert (active["state"], active["phys_state"], active["rate_gbps"]) == (4, 5, 400)


def test_link_down_and_missing_counters() -> None:
    ports = by_port(InfinibandSource(ROOT))
    down = ports[("mlx5_1", 1)]
    assert (down["state"], down["phys_state"], down["link_downed"]) == (1, 3, 3)
    assert "xmit_wait" not in down, "an HCA without the counter reports nothing, not 0"
    roce = ports[("mlx5_0", 2)]
    assert set(roce) == {"xmit_bytes", "rcv_bytes", "state", "phys_state", "rate_gbps"}
    assert roce["rate_gbps"] == 200


def test_a_vanished_file_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import shutil

    root = tmp_path / "infiniband"
    shutil.copytree(ROOT, root)
    source = InfinibandSource(root)
    (root / "mlx5_0/ports/1/counters/symbol_error").unlink()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            values = by_port(source)[("mlx5_0", 1)]
    assert "symbol_errors" not in values and "xmit_bytes" in values
    assert sum("symbol_error" in m for m in caplog.messages) == 1


def test_missing_root_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="does not exist"):
        InfinibandSource(tmp_path / "nope")
