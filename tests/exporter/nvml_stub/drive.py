"""Runs the NVML backend through the real pynvml binding, in a process of its own whose LD_LIBRARY_PATH
leads pynvml's CDLL("libnvidia-ml.so.1") to the stub (tests/exporter/test_nvml_stub.py starts it).

Reads a JSON list of steps on stdin, prints a JSON list of results (one per step) on stdout:
  {"op": "open", "xid_events": false}        NvmlSource(): {"gpus": [...], "driver_version": ...} or
                                             {"error": "BackendUnavailable", "message": ...}
  {"op": "open_source", "backend": "auto", "ib_root": PATH}   select.open_source: {"name": ...} or error
  {"op": "read"}                             one sampling cycle: {"readings": [...], "ports": N}
  {"op": "read_until", "index": I, "key": K, "timeout": S}   read until GPU I has value K, or with
                                             "xids": N instead of "key", has counted N XIDs
  {"op": "touch", "path": P} / {"op": "remove", "path": P}    (a stub trigger file)
  {"op": "write", "path": P, "text": T}      a file written whole (renamed into place), e.g. XIDs
  {"op": "pids", "index": I}                 running_pids and mig_running_pids
  {"op": "layout"}                           the stub's structure layout against pynvml's
  {"op": "close"}
Each result also carries "logs": the log records of that step, as "LEVEL name: message".
"""

from __future__ import annotations

import ctypes
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pynvml

from gpuscope.exporter.snapshot import GpuReading
from gpuscope.exporter.sources.base import BackendUnavailable
from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.sources.select import open_source

# The stub's C structure -> pynvml's ctypes structure of the same layout.
STRUCTURES = {
    "nvmlPciInfo_t": pynvml.nvmlPciInfo_t,
    "nvmlMemory_t": pynvml.c_nvmlMemory_t,
    "nvmlMemory_v2_t": pynvml.c_nvmlMemory_v2_t,
    "nvmlUtilization_t": pynvml.c_nvmlUtilization_t,
    "nvmlValue_t": pynvml.c_nvmlValue_t,
    "nvmlFieldValue_t": pynvml.c_nvmlFieldValue_t,
    "nvmlViolationTime_t": pynvml.c_nvmlViolationTime_t,
    "nvmlProcessInfo_t": pynvml.c_nvmlProcessInfo_v3_t,
    "nvmlEventData_t": pynvml.c_nvmlEventData_t,
    "nvmlGpmSupport_t": pynvml.c_nvmlGpmSupport_t,
    "nvmlGpmMetric_t": pynvml.c_nvmlGpmMetric_t,
    "nvmlGpmMetricsGet_t": pynvml.c_nvmlGpmMetricsGet_t,  # its size differs: the metrics array's length
    "nvmlDeviceAttributes_t": pynvml.c_nvmlDeviceAttributes,
}


class Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")

    def take(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines


def reading_json(reading: GpuReading) -> dict[str, Any]:
    gpu = reading.gpu
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "model": gpu.model,
        "pci_bus_id": gpu.pci_bus_id,
        "serial": gpu.serial,
        "up": reading.up,
        "values": reading.values,
        "links": {str(link): values for link, values in reading.links.items()},
        "xid_counts": {str(xid): n for xid, n in reading.xid_counts.items()},
        "mig": [
            {
                "gpu_instance_id": m.gpu_instance_id,
                "compute_instance_id": m.compute_instance_id,
                "profile": m.profile,
                "uuid": m.uuid,
                "values": m.values,
            }
            for m in reading.mig
        ],
    }


def read_until(source: NvmlSource, step: dict[str, Any]) -> tuple[GpuReading, ...]:
    """Sampling cycles until the step's condition holds (the test then finds it held) or time is up."""
    deadline = time.monotonic() + step.get("timeout", 5.0)
    while True:
        gpus, _ = source.read(time.time())
        reading = gpus[step["index"]]
        if "key" in step and step["key"] in reading.values:
            return gpus
        if "xids" in step and sum(reading.xid_counts.values()) >= step["xids"]:
            return gpus
        if time.monotonic() > deadline:
            return gpus
        time.sleep(0.02)


def layout_mismatches() -> list[str]:
    """Every field and size where the stub's C structures and pynvml's ctypes structures differ."""
    pynvml._LoadNvmlLibrary()  # as nvmlInit does: CDLL("libnvidia-ml.so.1"), i.e. the stub
    lib = pynvml.nvmlLib
    entry = lib.gpuscope_stub_layout
    entry.argtypes = [
        ctypes.c_uint,
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    c_offsets: dict[tuple[str, str | None], int] = {}
    type_name, field_name, value = ctypes.c_char_p(), ctypes.c_char_p(), ctypes.c_size_t()
    i = 0
    while entry(i, ctypes.byref(type_name), ctypes.byref(field_name), ctypes.byref(value)):
        assert type_name.value is not None
        field = field_name.value.decode() if field_name.value is not None else None
        c_offsets[type_name.value.decode(), field] = value.value
        i += 1
    problems = []
    for c_name, structure in STRUCTURES.items():
        expected: dict[str | None, int] = {}
        if c_name != "nvmlGpmMetricsGet_t":
            expected[None] = ctypes.sizeof(structure)
        if c_name != "nvmlValue_t":
            for field, *_ in structure._fields_:
                expected[field] = getattr(structure, field).offset
        for field, offset in expected.items():
            got = c_offsets.get((c_name, field))
            if got != offset:
                what = f"{c_name}.{field}" if field else f"sizeof({c_name})"
                problems.append(f"{what}: stub {got}, pynvml {offset}")
    stub_version = lib.gpuscope_stub_memory_v2_version()
    if stub_version != pynvml.nvmlMemory_v2:
        problems.append(f"nvmlMemory_v2: stub {stub_version:#x}, pynvml {pynvml.nvmlMemory_v2:#x}")
    return problems


def main() -> None:
    steps = json.load(sys.stdin)
    recorder = Recorder()
    logging.basicConfig(level=logging.DEBUG, handlers=[recorder])
    source: Any = None
    results = []
    for step in steps:
        op = step["op"]
        result: dict[str, Any] = {"op": op}
        try:
            if op == "open":
                source = NvmlSource(xid_events=step.get("xid_events", False))
                result["gpus"] = [gpu.uuid for gpu in source.gpus]
                result["driver_version"] = source.driver_version
            elif op == "open_source":
                source = open_source(step["backend"], Path(step["ib_root"]))
                result["name"] = source.name
            elif op == "read":
                gpus, ports = source.read(time.time())
                result["readings"] = [reading_json(r) for r in gpus]
                result["ports"] = len(ports)
            elif op == "read_until":
                result["readings"] = [reading_json(r) for r in read_until(source, step)]
            elif op == "touch":
                Path(step["path"]).touch()
            elif op == "write":
                partial = Path(step["path"] + ".partial")
                partial.write_text(step["text"])
                partial.rename(step["path"])
            elif op == "remove":
                Path(step["path"]).unlink()
            elif op == "pids":
                result["pids"] = source.running_pids(step["index"])
                result["mig_pids"] = source.mig_running_pids(step["index"])
            elif op == "layout":
                result["mismatches"] = layout_mismatches()
            elif op == "close":
                source.close()
            else:
                raise ValueError(f"unknown step {op!r}")
        except BackendUnavailable as exc:
            result["error"] = "BackendUnavailable"
            result["message"] = str(exc)
        result["logs"] = recorder.take()
        results.append(result)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
