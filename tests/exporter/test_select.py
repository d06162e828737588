"""--backend auto|nvml|amdsmi: what is chosen, and what an operator is told when nothing fits."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope.exporter.sources.base import BackendUnavailable, Source
from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.sources.select import open_source
from gpuscope.exporter.testing.fake_nvml import h100_node, make_fake_pynvml

IB_ROOT = Path(__file__).resolve().parent.parent / "data" / "sys" / "class" / "infiniband"


def unavailable(name: str):  # type: ignore[no-untyped-def]
    def factory() -> Source:
        raise BackendUnavailable(f"{name} library missing")

    return factory


def fake_nvml() -> Source:
    return NvmlSource(make_fake_pynvml(h100_node(8)), xid_events=False)


def test_auto_takes_nvml_and_adds_infiniband() -> None:
    source = open_source("auto", IB_ROOT, {"nvml": fake_nvml, "amdsmi": unavailable("amdsmi")})
    gpus, ports = source.read(0.0)
    assert source.name == "nvml+infiniband" and len(gpus) == 8 and len(ports) == 3
    source.close()


def test_auto_falls_back_to_the_next_backend(tmp_path: Path) -> None:
    source = open_source("auto", tmp_path / "no-ib", {"amdsmi": unavailable("amdsmi"), "nvml": fake_nvml})
    assert source.name == "nvml"
    source.close()


def test_auto_with_no_gpus_exports_infiniband_only() -> None:
    source = open_source("auto", IB_ROOT, {"nvml": unavailable("nvml")})
    assert source.name == "infiniband"


def test_auto_with_nothing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="no GPU library answered"):
        open_source("auto", tmp_path, {"nvml": unavailable("nvml")})


def test_explicit_backend_does_not_fall_back() -> None:
    with pytest.raises(BackendUnavailable, match="nvml library missing"):
        open_source("nvml", IB_ROOT, {"nvml": unavailable("nvml"), "amdsmi": fake_nvml})
