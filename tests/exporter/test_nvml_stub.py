"""The NVML backend through the real pynvml binding, against a stub libnvidia-ml.so.1 built from C here
(tests/exporter/nvml_stub/stub_nvml.c): the real ctypes structures, symbol lookups and error-code
mapping, with the failures real drivers show (a GPU refused at start, one lost mid-run, a counter
Hopper does not support, no v2 memory call, NVML not starting).

pynvml opens the library with CDLL("libnvidia-ml.so.1"), which only the dynamic loader's search path
can redirect, so the backend runs in a process of its own (tests/exporter/nvml_stub/drive.py, or the
`gpuscope exporter` command) with LD_LIBRARY_PATH set to the stub's folder."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.commands import GPUSCOPE, stop_process
from tests.waiting import eventually

STUB_DIR = Path(__file__).resolve().parent / "nvml_stub"
DRIVE = STUB_DIR / "drive.py"
IB_ROOT = Path(__file__).resolve().parent.parent / "data" / "sys" / "class" / "infiniband"

GIB = 2**30
MIB = 2**20
LINKS = 18
# nvml.h
NVML_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_RECOVERY = 0, 1
NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA, NVML_NVLINK_ERROR_DL_ECC_DATA = 2, 3, 4
NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION, NVML_ERROR_DRIVER_NOT_LOADED = 3, 4, 9
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_FI_DEV_MEMORY_TEMP, NVML_FI_DEV_PCIE_COUNT_TX_BYTES, NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 82, 197, 198
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS = 138, 0xFFFFFFFF
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230


@pytest.fixture(scope="session")
def stub_libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Folders holding a libnvidia-ml.so.1 each: "current" (driver R510 and later) and "r470" (no
    nvmlDeviceGetMemoryInfo_v2 symbol)."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        message = "no C compiler (cc, or $CC): cannot build the stub libnvidia-ml.so.1 for the NVML tests"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; CI must install one")
        pytest.skip(message)
    root = tmp_path_factory.mktemp("nvml_stub")
    folders = {}
    for name, flags in (("current", []), ("r470", ["-DSTUB_NO_MEMORY_V2"])):
        folder = root / name
        folder.mkdir()
        command = [compiler, "-shared", "-fPIC", "-O1", "-Wall", "-pthread", *flags]
        command += ["-o", str(folder / "libnvidia-ml.so.1"), str(STUB_DIR / "stub_nvml.c")]
        built = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if built.returncode != 0:
            pytest.fail(f"building the NVML stub failed:\n{' '.join(command)}\n{built.stderr}")
        folders[name] = folder
    return folders


@pytest.fixture
def stub(stub_libraries: dict[str, Path]) -> Path:
    return stub_libraries["current"]


def config(tmp_path: Path, *lines: str) -> Path:
    """A stub configuration (format: the comment at the top of stub_nvml.c)."""
    path = tmp_path / "nvml-stub.conf"
    path.write_text("\n".join(["wait_cap_ms=20", *lines]) + "\n")
    return path


def stub_env(library: Path, configuration: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(library), env.get("LD_LIBRARY_PATH")) if p)
    env["GPUSCOPE_NVML_STUB_CONFIG"] = str(configuration)
    return env


def drive(library: Path, configuration: Path, *steps: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps run by drive.py against the stub; one result per step."""
    done = subprocess.run(
        [sys.executable, str(DRIVE)],
        input=json.dumps(list(steps)),
        capture_output=True,
        text=True,
        env=stub_env(library, configuration),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


def readings(result: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = result["readings"]
    return found


def logs(results: list[dict[str, Any]]) -> list[str]:
    return [line for result in results for line in result["logs"]]


OPEN = {"op": "open"}
READ = {"op": "read"}
CLOSE = {"op": "close"}


def test_the_stub_lays_out_every_structure_as_pynvml_does(stub: Path, tmp_path: Path) -> None:
    """Offsets and sizes of each structure the backend passes, and nvmlMemory_v2's version word."""
    [layout] = drive(stub, config(tmp_path, "gpus=1"), {"op": "layout"})
    assert layout["mismatches"] == []


def test_values_arrive_in_catalog_units_through_the_real_binding(stub: Path, tmp_path: Path) -> None:
    conf = config(
        tmp_path,
        "gpus=2",
        "driver_version=550.54.15",
        "gpu.1.uuid=GPU-3f1a9c2e-7b44-4e0a-9d1c-5a8e2b6f0c11",
        "gpu.1.name=NVIDIA H200",
        "gpu.1.bus_id=00000000:9A:00.0",
        "gpu.1.power_mw=455250",
        "gpu.1.power_limit_mw=650000",
        "gpu.1.energy_mj=123456789",
        "gpu.1.sm_clock_mhz=1755",
        "gpu.1.mem_clock_mhz=3201",
        "gpu.1.util_gpu=64",
        "gpu.1.util_mem=12",
        "gpu.1.temp_c=58",
        "gpu.1.mem_temp_c=66",
        f"gpu.1.fb_total={141 * GIB}",
        f"gpu.1.fb_used={20 * GIB}",
        f"gpu.1.fb_reserved={600 * MIB}",
        "gpu.1.power_violation_ns=2500000000",
        "gpu.1.thermal_violation_ns=750000000",
        "gpu.1.clock_event_reasons=0x4",
        "gpu.1.pcie_replay=3",
        "gpu.1.ecc_corrected=5",
        "gpu.1.ecc_uncorrected=1",
        "gpu.1.remapped_correctable=2",
        "gpu.1.remap_pending=1",
        f"gpu.1.pcie_tx_bytes_per_s={1_500_000 * 1024}",
        "gpu.1.nvlink_tx_kib=5000000",
        "gpu.1.sm_active_pct=71.5",
        "gpu.1.tensor_active_pct=33.25",
        "gpu.1.enc_util=12",
        "gpu.1.dec_util=40",
        "gpu.1.serial=1321021034567",
    )
    results = drive(stub, conf, OPEN, READ, READ, CLOSE)  # GPM and the PCIe rate need two samples
    assert results[0]["driver_version"] == "550.54.15"
    first, second = readings(results[2])
    assert first["uuid"] == "GPU-5a1d0000-0000-4000-8000-000000000000", "the stub answered, not another NVML"
    assert second["uuid"] == "GPU-3f1a9c2e-7b44-4e0a-9d1c-5a8e2b6f0c11"
    assert (second["model"], second["pci_bus_id"]) == ("NVIDIA H200", "00000000:9A:00.0")
    v = second["values"]
    assert v["power_w"] == 455.25 and v["power_limit_w"] == 650.0, "mW -> W"
    assert v["energy_j"] == 123456.789, "mJ -> J"
    assert v["sm_clock_mhz"] == 1755 and v["mem_clock_mhz"] == 3201
    assert v["util_pct"] == 64 and v["mem_copy_util_pct"] == 12
    assert v["temp_c"] == 58 and v["mem_temp_c"] == 66, "memory temperature from a field value (uint)"
    assert v["fb_total_bytes"] == 141 * GIB
    assert v["fb_used_bytes"] == 20 * GIB, "nvmlMemory_v2_t: used leaves out the driver's reserve"
    assert v["throttle_power_s"] == 2.5 and v["throttle_thermal_s"] == 0.75, "ns -> s"
    assert v["clock_event_reasons"] == 4 and v["pcie_replay"] == 3
    assert (v["ecc_corrected"], v["ecc_uncorrected"]) == (5, 1)
    assert (v["remapped_rows_correctable"], v["remapped_rows_uncorrectable"]) == (2, 0)
    assert (v["remap_pending"], v["remap_failure"]) == (1.0, 0.0)
    assert v["pcie_tx_bytes_per_s"] == pytest.approx(1_500_000 * 1024, rel=1e-4), "from the byte counters"
    assert v["pcie_rx_bytes_per_s"] == pytest.approx(900_000 * 1024, rel=1e-4)
    assert v["sm_active_pct"] == 71.5 and v["tensor_active_pct"] == 33.25, "GPM metrics (doubles)"
    assert v["gr_engine_active_pct"] == 96.0 and v["dram_active_pct"] == 38.0, "DCGM's profiling fields from GPM"
    assert (v["enc_util_pct"], v["dec_util_pct"]) == (12, 40) and v["fb_reserved_bytes"] == 600 * MIB
    assert v["vgpu_licensed"] == 0.0, "bare metal"
    assert second["serial"] == "1321021034567"
    links = second["links"]
    assert sorted(map(int, links)) == list(range(LINKS))
    assert links["3"]["link_tx_bytes"] == (5_000_000 + 3) * 1024, "KiB -> bytes, per link"
    assert v["nvlink_tx_bytes"] == sum((5_000_000 + link) * 1024 for link in range(LINKS)), "NVML's own sum"
    assert first["values"]["power_w"] == 612.5 and first["values"]["fb_used_bytes"] == 61 * GIB
    assert [line for line in logs(results) if "WARNING" in line or "ERROR" in line] == []
    assert not any("Function Not Found" in line for line in logs(results)), "every symbol the backend asks for"


def test_a_gpu_refused_at_start_is_down_and_the_others_report(stub: Path, tmp_path: Path) -> None:
    conf = config(tmp_path, "gpus=4", f"gpu.2.fail.handle={NVML_ERROR_NO_PERMISSION}", "gpu.3.processes=4242,4343")
    results = drive(stub, conf, OPEN, READ, {"op": "pids", "index": 2}, {"op": "pids", "index": 3}, CLOSE)
    gpus = readings(results[1])
    assert [g["up"] for g in gpus] == [True, True, False, True]
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert gpus[2]["values"] == {} and gpus[2]["uuid"] != "GPU-5a1d0000-0000-4000-8000-000000000002", "never opened"
    assert gpus[3]["values"]["power_w"] == 612.5
    assert any("GPU 2" in m and "Insufficient Permissions" in m for m in results[0]["logs"]), results[0]["logs"]
    assert results[2]["pids"] == [] and results[3]["pids"] == [4242, 4343], "nvmlProcessInfo_t array, two calls"


def test_a_gpu_lost_mid_run_is_down_while_the_others_report(stub: Path, tmp_path: Path) -> None:
    lost = tmp_path / "gpu1-lost"
    conf = config(tmp_path, "gpus=3", f"gpu.1.lost_file={lost}")
    touch, heal = {"op": "touch", "path": str(lost)}, {"op": "remove", "path": str(lost)}
    results = drive(stub, conf, OPEN, READ, touch, READ, READ, READ, heal, READ, CLOSE)
    ups = [[g["up"] for g in readings(r)] for r in results if r["op"] == "read"]
    assert ups == [[True] * 3, [True, False, True], [True, False, True], [True, False, True], [True] * 3]
    during = readings(results[3])
    assert during[1]["values"] == {} and during[1]["uuid"] == "GPU-5a1d0000-0000-4000-8000-000000000001"
    assert during[0]["values"]["power_w"] == 612.5 and during[2]["values"]["fb_used_bytes"] == 61 * GIB
    assert sum("fell off the bus" in line for line in logs(results)) == 1, "logged once, not every cycle"
    assert any("answers again" in line for line in results[7]["logs"])


def test_a_gpu_lost_at_start_joins_when_it_answers(stub: Path, tmp_path: Path) -> None:
    lost = tmp_path / "gpu0-lost"
    lost.touch()
    conf = config(tmp_path, "gpus=2", f"gpu.0.lost_file={lost}")
    steps = [OPEN, READ, {"op": "remove", "path": str(lost)}, *[READ] * 10, CLOSE]  # retried every 10 cycles
    results = drive(stub, conf, *steps)
    assert any("GPU 0" in m and "GPU is lost" in m for m in results[0]["logs"]), results[0]["logs"]
    assert [g["up"] for g in readings(results[1])] == [False, True]
    joined = readings(results[-2])[0]
    assert joined["up"] and joined["uuid"] == "GPU-5a1d0000-0000-4000-8000-000000000000"


def test_xids_are_counted_and_keep_coming_after_another_gpu_is_lost(stub: Path, tmp_path: Path) -> None:
    """nvmlEventData_t carries the handle the event came from; after one GPU of the event set falls off
    the bus, waiting answers GPU_IS_LOST until the set is built again without it."""
    xids = [tmp_path / f"gpu{i}-xids" for i in range(3)]
    lost = tmp_path / "gpu0-lost"
    conf = config(tmp_path, "gpus=3", f"gpu.0.lost_file={lost}", *[f"gpu.{i}.xid_file={xids[i]}" for i in range(3)])
    xids[1].write_text("79,79,48\n")
    results = drive(
        stub,
        conf,
        {"op": "open", "xid_events": True},
        {"op": "read_until", "index": 1, "xids": 3},
        {"op": "touch", "path": str(lost)},
        READ,
        {"op": "write", "path": str(xids[2]), "text": "31 999"},
        {"op": "read_until", "index": 2, "xids": 2},
        CLOSE,
    )
    before = readings(results[1])
    assert before[1]["xid_counts"] == {"79": 2, "48": 1} and before[0]["xid_counts"] == {}
    after = readings(results[5])
    assert [g["up"] for g in after] == [False, True, True]
    assert after[2]["xid_counts"] == {"31": 1, "0": 1}, "XID 999 (unknown to the driver) is counted as 0"
    assert after[1]["xid_counts"] == {"79": 2, "48": 1}


def test_an_unsupported_crc_data_counter_leaves_the_other_nvlink_counters(stub: Path, tmp_path: Path) -> None:
    """As Hopper: NOT_SUPPORTED for the CRC-data error counter on every link, the others counting."""
    conf = config(
        tmp_path,
        "gpus=1",
        f"gpu.0.fail.nvlink_error.{NVML_NVLINK_ERROR_DL_CRC_DATA}={NVML_ERROR_NOT_SUPPORTED}",
        f"gpu.0.nvlink_error.{NVML_NVLINK_ERROR_DL_CRC_FLIT}=3",
        f"gpu.0.nvlink_error.{NVML_NVLINK_ERROR_DL_REPLAY}=2",
        f"gpu.0.nvlink_error.{NVML_NVLINK_ERROR_DL_RECOVERY}=1",
        f"gpu.0.nvlink_error.{NVML_NVLINK_ERROR_DL_ECC_DATA}=7",
    )
    results = drive(stub, conf, OPEN, READ, CLOSE)
    [gpu] = readings(results[1])
    v = gpu["values"]
    assert v["nvlink_crc_errors"] == 3 * LINKS, "flit CRC errors, though data CRC is unsupported"
    assert v["nvlink_replay_errors"] == 2 * LINKS and v["nvlink_recovery_errors"] == 1 * LINKS
    assert gpu["links"]["5"] == {
        "link_tx_bytes": (10_000_000 + 5) * 1024,
        "link_rx_bytes": (9_000_000 + 5) * 1024,
        "link_crc_errors": 3,
        "link_replay_errors": 2,
        "link_recovery_errors": 1,
        "link_ecc_errors": 7,
    }
    assert any("CRC_DATA error counter not available (Not Supported)" in line for line in results[1]["logs"])


def test_a_field_the_driver_does_not_support_leaves_its_neighbours(stub: Path, tmp_path: Path) -> None:
    """Per-field statuses in one nvmlDeviceGetFieldValues call: no memory temperature, no PCIe byte
    counters (a driver before 555: PCIe throughput is then measured on a thread, in KB/s), no NVML sum
    over all links; the NVLink per-link fields still count."""
    conf = config(
        tmp_path,
        "gpus=1",
        f"gpu.0.fail.field.{NVML_FI_DEV_MEMORY_TEMP}={NVML_ERROR_NOT_SUPPORTED}",
        f"gpu.0.fail.field.{NVML_FI_DEV_PCIE_COUNT_TX_BYTES}={NVML_ERROR_NOT_SUPPORTED}",
        f"gpu.0.fail.field.{NVML_FI_DEV_PCIE_COUNT_RX_BYTES}={NVML_ERROR_NOT_SUPPORTED}",
        f"gpu.0.fail.field.{NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX}.{ALL_LINKS}={NVML_ERROR_NOT_SUPPORTED}",
        f"gpu.0.pcie_tx_bytes_per_s={1_200_000 * 1024}",
    )
    results = drive(stub, conf, OPEN, READ, {"op": "read_until", "index": 0, "key": "pcie_tx_bytes_per_s"}, CLOSE)
    [gpu] = readings(results[2])
    v = gpu["values"]
    assert "mem_temp_c" not in v
    assert v["pcie_tx_bytes_per_s"] == 1_200_000 * 1024 and v["pcie_rx_bytes_per_s"] == 900_000 * 1024
    assert v["nvlink_tx_bytes"] == sum((10_000_000 + link) * 1024 for link in range(LINKS)), "sum of the links"
    assert v["nvlink_rx_bytes"] == sum((9_000_000 + link) * 1024 for link in range(LINKS)), "NVML's sum"
    assert gpu["links"]["17"]["link_tx_bytes"] == (10_000_000 + 17) * 1024


def test_the_drivers_recovery_action_through_the_real_binding(stub: Path, tmp_path: Path) -> None:
    """Field 230 in the cycle's field-values call: none, an action that changes mid-run, and drivers older
    than the field (NOT_SUPPORTED, or INVALID_ARGUMENT for an id it does not know, in the field's own
    status): absent there, never 0, and the fields beside it still read."""
    action = tmp_path / "gpu1-recovery-action"
    conf = config(
        tmp_path,
        "gpus=4",
        f"gpu.1.recovery_action_file={action}",
        "gpu.2.recovery_action_field=0",  # an id the driver does not know: INVALID_ARGUMENT
        f"gpu.3.fail.field.{NVML_FI_DEV_GET_GPU_RECOVERY_ACTION}={NVML_ERROR_NOT_SUPPORTED}",
    )
    results = drive(
        stub,
        conf,
        OPEN,
        READ,
        {"op": "write", "path": str(action), "text": "2\n"},
        READ,
        {"op": "write", "path": str(action), "text": "4\n"},
        READ,
        {"op": "remove", "path": str(action)},
        READ,
        CLOSE,
    )
    seen = [[g["values"].get("recovery_action") for g in readings(r)] for r in results if r["op"] == "read"]
    assert seen == [[0, 0, None, None], [0, 2, None, None], [0, 4, None, None], [0, 0, None, None]]
    for gpu in readings(results[-2]):
        assert gpu["values"]["mem_temp_c"] == 78 and gpu["values"]["nvlink_tx_bytes"] > 0, "its neighbours read"
    assert [line for line in logs(results) if "WARNING" in line or "ERROR" in line] == []


@pytest.mark.parametrize(("build", "used"), [("current", 61 * GIB), ("r470", 61 * GIB + 512 * MIB)])
def test_memory_used_leaves_out_the_reserve_where_the_driver_has_v2(
    stub_libraries: dict[str, Path], tmp_path: Path, build: str, used: int
) -> None:
    """nvmlDeviceGetMemoryInfo_v2 (R510 and later) reports the driver's reserve apart; a driver without
    the symbol is asked v1 instead, whose `used` includes the reserve."""
    results = drive(stub_libraries[build], config(tmp_path, "gpus=1"), OPEN, READ, READ, CLOSE)
    assert [readings(r)[0]["values"]["fb_used_bytes"] for r in results[1:3]] == [used, used]
    fallback = [line for line in logs(results) if "nvmlDeviceGetMemoryInfo_v2 unavailable" in line]
    assert len(fallback) == (1 if build == "r470" else 0)
    assert all("Function Not Found" in line for line in fallback)


@pytest.mark.parametrize("plain_names", [False, True])
def test_a_mig_gpu_through_the_real_binding(stub: Path, tmp_path: Path, plain_names: bool) -> None:
    """Without privileges: the parent's memory from its instances, utilisation absent, PIDs per MIG
    device; profiles from the names, or from nvmlDeviceGetAttributes_v2 where names lack them."""
    conf = config(
        tmp_path,
        "gpus=2",
        "gpu.1.mig=1",
        "gpu.1.privileged=0",
        f"gpu.1.mig_plain_names={int(plain_names)}",
        "gpu.1.mig.0=2,0,3g.40gb,40192,1000,60,30,100",
        "gpu.1.mig.2=9,0,1g.10gb,9856,200,12,21,200 201",
    )
    results = drive(stub, conf, OPEN, READ, READ, {"op": "pids", "index": 1}, CLOSE)
    whole, parent = readings(results[2])
    assert whole["mig"] == [] and whole["values"]["util_pct"] == 97
    assert [(m["gpu_instance_id"], m["compute_instance_id"], m["profile"]) for m in parent["mig"]] == [
        (2, 0, "3g.40gb"),
        (9, 0, "1g.10gb"),
    ]
    small = parent["mig"][1]
    assert small["uuid"] == "MIG-5a1d0000-0001-4000-8000-000000000002"
    assert small["values"] == {
        "mig_fb_used_bytes": 200 * MIB,
        "mig_fb_total_bytes": 9856 * MIB,
        "mig_sm_active_pct": 12.0,
        "mig_tensor_active_pct": 21.0,
        "mig_gr_engine_active_pct": 44.0,
        "mig_dram_active_pct": 18.0,
    }
    assert "util_pct" not in parent["values"], "NVML has no utilisation for a MIG-enabled GPU"
    assert parent["values"]["fb_used_bytes"] == 1200 * MIB and parent["values"]["power_w"] == 612.5
    assert results[3]["pids"] == [100, 200, 201]
    assert results[3]["mig_pids"] == {parent["mig"][0]["uuid"]: [100], small["uuid"]: [200, 201]}


@pytest.mark.parametrize(
    ("code", "needle"),
    [
        (NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
        (NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML/RM version mismatch"),  # driver upgraded, not rebooted
    ],
)
def test_nvml_not_starting_is_a_clear_error_and_auto_moves_on(
    stub: Path, tmp_path: Path, code: int, needle: str
) -> None:
    conf = config(tmp_path, "gpus=8", f"init_error={code}")
    opened, auto = drive(stub, conf, OPEN, {"op": "open_source", "backend": "auto", "ib_root": str(IB_ROOT)})
    assert opened["error"] == "BackendUnavailable"
    assert needle in opened["message"] and "NVIDIA driver" in opened["message"]
    assert auto["name"] == "infiniband", "auto falls back to what else the node has"
    assert any("auto: nvml unavailable: NVML could not start: " in line and needle in line for line in auto["logs"])


def test_the_exporter_command_falls_back_and_says_why(stub: Path, tmp_path: Path) -> None:
    conf = config(tmp_path, "gpus=8", f"init_error={NVML_ERROR_DRIVER_NOT_LOADED}")
    args = ["exporter", "--backend", "auto", "--listen", "127.0.0.1:0", "--ib-root", str(tmp_path / "no-ib")]
    done = subprocess.run(
        [*GPUSCOPE, *args], capture_output=True, text=True, env=stub_env(stub, conf), timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "auto: nvml unavailable: NVML could not start: Driver Not Loaded" in done.stderr
    assert "no GPU library answered" in done.stderr and "Traceback" not in done.stderr


@pytest.fixture
def exporter_process(stub: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """`gpuscope exporter --backend nvml` on 127.0.0.1 (a free port) over a 3-GPU stub, GPU 1 refused."""
    conf = config(tmp_path, "gpus=3", f"gpu.1.fail.handle={NVML_ERROR_NO_PERMISSION}", "gpu.2.power_mw=455250")
    log = tmp_path / "exporter.log"
    args = ["exporter", "--backend", "nvml", "--listen", "127.0.0.1:0", "--interval", "0.2", "--jobs", "none"]
    args += ["--ib-root", str(tmp_path / "no-ib")]
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [*GPUSCOPE, *args], stdout=subprocess.DEVNULL, stderr=stderr, env=stub_env(stub, conf)
        )
    try:
        yield process, log
    finally:
        stop_process(process)


def test_the_exporter_command_serves_the_gpus_nvml_opens(
    exporter_process: tuple[subprocess.Popen[bytes], Path],
) -> None:
    process, log = exporter_process

    def serving() -> str:
        assert process.poll() is None, log.read_text()
        line = next(line for line in log.read_text().splitlines() if "serving http://" in line)
        return line.split("serving ", 1)[1].split()[0].rstrip(",")

    url = eventually(serving, timeout=30, ignoring=(StopIteration,), what="the exporter to say where it serves")
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")

    def samples() -> dict[tuple[str, str], float]:
        text = httpx.get(url, timeout=5).text
        found = {
            (sample.name, sample.labels["gpu"]): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if "gpu" in sample.labels and "link" not in sample.labels
        }
        assert ("gpuscope_gpu_up", "2") in found
        return found

    metrics = eventually(samples, timeout=30, ignoring=(AssertionError, httpx.HTTPError), what="GPU metrics")
    assert [metrics["gpuscope_gpu_up", str(i)] for i in range(3)] == [1, 0, 1]
    assert metrics["gpuscope_gpu_power_watts", "0"] == 612.5 and metrics["gpuscope_gpu_power_watts", "2"] == 455.25
    assert metrics["gpuscope_gpu_memory_used_bytes", "0"] == 61 * GIB
    assert metrics["gpuscope_gpu_sm_clock_hertz", "2"] == 1980e6
    assert ("gpuscope_gpu_power_watts", "1") not in metrics
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert "GPU 1: NVML will not open it (Insufficient Permissions)" in log.read_text()
