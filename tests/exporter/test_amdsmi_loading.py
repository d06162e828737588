"""An amdsmi wrapper that does not match the node's ROCm is one clear line, and auto falls back (defect 8)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuscope.exporter.sources.amdsmi import AmdSmiSource, load_amdsmi
from gpuscope.exporter.sources.base import BackendUnavailable, Source
from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.sources.select import GPU_BACKENDS, open_source
from gpuscope.exporter.testing.fake_amdsmi import FakeAmdSmiInstall, make_fake_amdsmi, mi300x_node
from gpuscope.exporter.testing.fake_nvml import h100_node, make_fake_pynvml

Install = Callable[..., None]


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """Makes `import amdsmi` find a fake wrapper `wrapper` over a fake ROCm library `rocm`."""

    def put(wrapper: str, rocm: str) -> None:
        monkeypatch.setattr(sys, "meta_path", [FakeAmdSmiInstall(mi300x_node(2), wrapper, rocm), *sys.meta_path])

    monkeypatch.delenv("ROCM_PATH", raising=False)
    sys.modules.pop("amdsmi", None)
    yield put
    sys.modules.pop("amdsmi", None)  # a fake that imported must not serve later tests


def test_newer_wrapper_than_rocm_says_so_in_one_line(install: Install) -> None:
    install(wrapper="7.0", rocm="6.2")
    with pytest.raises(BackendUnavailable) as raised:
        load_amdsmi()
    message = str(raised.value)
    assert "does not match this node's ROCm library" in message
    assert "undefined symbol: amdsmi_get_gpu_kfd_info" in message, "the cause, for the operator"
    assert "/opt/rocm/share/amd_smi" in message and "docs/amd.md" in message
    assert "\n" not in message


def test_auto_falls_back_past_a_mismatched_wrapper(install: Install, tmp_path: Path) -> None:
    install(wrapper="7.0", rocm="6.2")

    def nvml() -> Source:
        return NvmlSource(make_fake_pynvml(h100_node(2)), xid_events=False)

    source = open_source("auto", tmp_path / "no-ib", {"amdsmi": GPU_BACKENDS["amdsmi"], "nvml": nvml})
    assert source.name == "nvml"
    source.close()


def test_matching_wrapper_is_used(install: Install, tmp_path: Path) -> None:
    install(wrapper="6.2", rocm="6.2")
    source = open_source("amdsmi", tmp_path / "no-ib")
    assert source.name == "amdsmi" and len(source.read(0.0)[0]) == 2
    source.close()


def test_older_wrapper_on_newer_rocm_imports(install: Install) -> None:
    install(wrapper="6.4", rocm="7.0")
    assert load_amdsmi().__version__ == "6.4"


@pytest.mark.parametrize("error", [AttributeError("amdsmi_init"), TypeError("bad argument"), OSError("ELF class")])
def test_any_failure_to_start_other_than_the_librarys_own_is_a_mismatch(error: Exception) -> None:
    smi = make_fake_amdsmi(mi300x_node(1))

    def broken_init(flag: int = 0) -> None:
        raise error

    smi.amdsmi_init = broken_init  # type: ignore[attr-defined]
    with pytest.raises(BackendUnavailable, match="does not match this node's ROCm library"):
        AmdSmiSource(smi)
