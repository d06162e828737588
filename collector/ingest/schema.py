"""The request body of POST /api/v1/samples as OpenAPI describes it: a JSON Schema of version 1 and the
binary content type of version 2. Documentation only: the route reads the body itself (FastAPI parses
nothing), and the rules, with the ones a schema cannot say, are in docs/ingest-format.md."""

from __future__ import annotations

from typing import Any

from gpuscope.collector.ingest.batch import (
    FORMAT,
    MAX_DEVICES,
    MAX_EVENTS,
    MAX_JOB_NAME,
    MAX_JOB_RUNS,
    MAX_JSON_BYTES,
    MAX_NAME,
    MAX_ROWS,
)
from gpuscope.collector.ingest.body_rules import BINARY, ENCODINGS, JSON
from gpuscope.collector.store.columns import GPU_COLUMNS, PORT_COLUMNS, Column

# Units of the metric keys (the ranges come from the columns).
UNITS = {
    "util_pct": "%",
    "mem_copy_util_pct": "%",
    "sm_active_pct": "%",
    "tensor_active_pct": "%",
    "fb_used_bytes": "bytes",
    "fb_total_bytes": "bytes",
    "temp_c": "°C",
    "mem_temp_c": "°C",
    "power_w": "W",
    "power_limit_w": "W",
    "energy_j": "J (counter)",
    "sm_clock_mhz": "MHz",
    "mem_clock_mhz": "MHz",
    "clock_event_reasons": "NVML bitmask",
    "pcie_replay": "count (counter)",
    "ecc_corrected": "count (counter)",
    "ecc_uncorrected": "count (counter)",
    "pcie_tx_bytes_per_s": "bytes/s",
    "pcie_rx_bytes_per_s": "bytes/s",
    "throttle_power_s": "s (counter)",
    "throttle_thermal_s": "s (counter)",
    "remapped_rows_correctable": "count (counter)",
    "remapped_rows_uncorrectable": "count (counter)",
    "remap_pending": "0 or 1",
    "remap_failure": "0 or 1",
    "recovery_action": "NVML recovery action (0 none .. 7 system reboot)",
    "nvlink_tx_bytes": "bytes (counter, all links)",
    "nvlink_rx_bytes": "bytes (counter, all links)",
    "nvlink_crc_errors": "count (counter, all links)",
    "nvlink_replay_errors": "count (counter, all links)",
    "nvlink_recovery_errors": "count (counter, all links)",
    "xmit_bytes": "bytes (counter)",
    "rcv_bytes": "bytes (counter)",
    "xmit_packets": "count (counter)",
    "rcv_packets": "count (counter)",
    "xmit_wait": "ticks (counter)",
    "symbol_errors": "count (counter)",
    "link_downed": "count (counter)",
    "rcv_errors": "count (counter)",
    "state": "1 down .. 4 active",
    "rate_gbps": "Gb/s",
    "link_error_recovery": "count (counter)",
    "xmit_discards": "count (counter)",
    "phys_state": "2 polling .. 5 link up",
}

# The complete example of docs/ingest-format.md (a test keeps the two equal, and posts the document's).
EXAMPLE: dict[str, Any] = {
    "format": "gpuscope-samples",
    "version": 1,
    "exporter_id": "6f1c3a0e-8a51-4c4e-9a57-3f0b1f7f0d2e",
    "seq": 1842,
    "source": {"cluster": "prod-a", "rack": "r12", "node": "gpu-r12-07", "backend": "nvml"},
    "gpus": [
        {
            "index": 0,
            "uuid": "GPU-5b1a7e0c-3f7d-4c1e-9a0b-2d6f8e4c1a90",
            "model": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": "00000000:18:00.0",
        },
        {"index": 1, "uuid": "", "model": "", "pci_bus_id": ""},
    ],
    "ports": [{"device": "mlx5_0", "port": 1}],
    "jobs": [{"id": "4711", "user": "alice"}],
    "gpu_samples": {
        "ts": [1795305008.51, 1795305008.51, 1795305009.51, 1795305009.51],
        "gpu": [0, 1, 0, 1],
        "up": [True, False, True, False],
        "job": [0, None, 0, None],
        "values": {
            "util_pct": [98, None, 97, None],
            "power_w": [641.5, None, 644.25, None],
            "temp_c": [61, None, 62, None],
            "fb_used_bytes": [71940702208, None, 71940702208, None],
            "energy_j": [1234567.5, None, 1235211.0, None],
            "ecc_corrected": [0, None, 0, None],
            "nvlink_tx_bytes": [9223372036854775000, None, 9223372036854775807, None],
        },
    },
    "port_samples": {
        "ts": [1795305008.51, 1795305009.51],
        "port": [0, 0],
        "values": {
            "xmit_bytes": [123456789012, 123468129012],
            "rcv_bytes": [98765432109, 98776543210],
            "state": [4, 4],
            "rate_gbps": [400, 400],
        },
    },
    "events": [
        {
            "ts": 1795305009.2,
            "gpu": 0,
            "kind": "xid",
            "code": 79,
            "count": 1,
            "message": "GPU has fallen off the bus",
        },
        {"ts": 1795305009.3, "gpu": 1, "kind": "gpu_lost"},
    ],
}


def _name(limit: int = MAX_NAME, what: str = "") -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": limit,
        "description": f"{what}1-{limit} printable characters",
    }


def _name_or_null(limit: int = MAX_NAME) -> dict[str, Any]:
    return {**_name(limit), "type": ["string", "null"]}


def _rows(item: dict[str, Any], description: str) -> dict[str, Any]:
    return {"type": "array", "maxItems": MAX_ROWS, "items": item, "description": description}


def _metric(column: Column) -> dict[str, Any]:
    kind = "integer (rounded)" if column.integer else "number"
    return _rows(
        {"type": ["number", "null"], "minimum": column.low, "maximum": column.high},
        f"{UNITS[column.key]}; {kind} from {column.low} to {column.high}, or null (not reported)",
    )


def _values(columns: tuple[Column, ...]) -> dict[str, Any]:
    return {
        "type": "object",
        "description": "One array per metric key, one entry per row; a key this collector does not know is"
        " ignored (and named in the response's ignored_fields)",
        "properties": {c.key: _metric(c) for c in columns},
        "additionalProperties": _rows({"type": ["number", "null"]}, "a metric key this collector does not know"),
    }


_KNOWN_OR_EMPTY = {
    "type": "string",
    "maxLength": MAX_NAME,
    "description": '1-128 printable characters, or "" if not known',
}
_TS = _rows({"type": "number"}, "seconds since the Unix epoch; within the retention period, at most 300 s ahead")

V1_SCHEMA: dict[str, Any] = {
    "title": "gpuscope-samples version 1",
    "type": "object",
    "required": ["format", "version", "exporter_id", "seq", "source", "gpus", "gpu_samples"],
    "properties": {
        "format": {"type": "string", "enum": [FORMAT]},
        "version": {"type": "integer", "enum": [1]},
        "exporter_id": {"type": "string", "format": "uuid", "description": "random per exporter process"},
        "seq": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1, "description": "increasing per batch"},
        "source": {
            "type": "object",
            "required": ["cluster", "rack", "node"],
            "properties": {
                "cluster": _name(),
                "rack": _name(),
                "node": _name(),
                "backend": {**_name(), "type": ["string", "null"], "description": "optional; default 'unknown'"},
            },
        },
        "gpus": {
            "type": "array",
            "maxItems": MAX_DEVICES,
            "items": {
                "type": "object",
                "required": ["index", "uuid", "model", "pci_bus_id"],
                "properties": {
                    "index": {"type": "integer", "minimum": 0, "maximum": MAX_DEVICES - 1, "description": "unique"},
                    "uuid": _KNOWN_OR_EMPTY,
                    "model": _KNOWN_OR_EMPTY,
                    "pci_bus_id": _KNOWN_OR_EMPTY,
                },
            },
        },
        "ports": {
            "type": ["array", "null"],
            "maxItems": MAX_DEVICES,
            "description": "optional (a node without InfiniBand); no (device, port) pair twice",
            "items": {
                "type": "object",
                "required": ["device", "port"],
                "properties": {"device": _name(64), "port": {"type": "integer", "minimum": 1, "maximum": 255}},
            },
        },
        "jobs": {
            "type": ["array", "null"],
            "maxItems": MAX_DEVICES,
            "description": "optional: the jobs gpu_samples.job refers to by position; omitted: no attribution",
            "items": {
                "type": "object",
                "required": ["id"],
                "properties": {
                    "id": _name(MAX_JOB_NAME),
                    "user": _name_or_null(),
                    # Kubernetes: the pod holding the GPU, its container, and the workload grouping pods into
                    # the job (e.g. "JobSet/train-7"); left out or null elsewhere
                    "namespace": _name_or_null(63),
                    "pod": _name_or_null(MAX_JOB_NAME),
                    "container": _name_or_null(63),
                    "workload": _name_or_null(MAX_JOB_NAME),
                    # Slurm: the job's account and partition; left out or null elsewhere
                    "account": _name_or_null(),
                    "partition": _name_or_null(),
                },
            },
        },
        "gpu_samples": {
            "type": "object",
            "required": ["ts", "gpu", "up", "values"],
            "properties": {
                "ts": _TS,
                "gpu": _rows({"type": "integer", "minimum": 0, "maximum": MAX_DEVICES - 1}, "an index listed in gpus"),
                "up": _rows({"type": "boolean"}, "whether the GPU answered"),
                "job": _rows(
                    {"type": ["integer", "null"], "minimum": -1, "maximum": MAX_DEVICES - 1},
                    f"required when jobs is given: a position in jobs, or null or -1 (no job); at most"
                    f" {MAX_JOB_RUNS} runs of one job per GPU per batch",
                ),
                "values": _values(GPU_COLUMNS),
            },
        },
        "port_samples": {
            "type": ["object", "null"],
            "description": "optional (a node without InfiniBand)",
            "required": ["ts", "port", "values"],
            "properties": {
                "ts": _TS,
                "port": _rows({"type": "integer", "minimum": 0, "maximum": MAX_DEVICES - 1}, "a position in ports"),
                "values": _values(PORT_COLUMNS),
            },
        },
        "events": {
            "type": ["array", "null"],
            "maxItems": MAX_EVENTS,
            "items": {
                "type": "object",
                "required": ["ts", "kind"],
                "properties": {
                    "ts": {"type": "number"},
                    "gpu": {"type": ["integer", "null"], "description": "an index listed in gpus, or null (the node)"},
                    "kind": {**_name(64), "pattern": "^[A-Za-z0-9_]+$"},
                    "code": {"type": ["integer", "null"], "minimum": 0, "maximum": 2**31 - 1},
                    "count": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1, "default": 1},
                    "message": {**_name(1024), "type": ["string", "null"]},
                },
            },
        },
    },
}

REQUEST_BODY: dict[str, Any] = {
    "required": True,
    "description": (
        f"One batch, in format version 1 ({JSON}) or version 2 ({BINARY});"
        " either may be sent with Content-Encoding: gzip. The complete rules, limits and error codes are in"
        f" docs/ingest-format.md. JSON text (a version 1 body, a version 2 header) at most {MAX_JSON_BYTES} bytes"
        " after decompression."
    ),
    "content": {
        JSON: {"schema": V1_SCHEMA, "example": EXAMPLE},
        BINARY: {
            "schema": {
                "type": "string",
                "format": "binary",
                "description": "Version 2: b'GPSB', the header length (u32 little-endian), the header (the version 1"
                ' object with "version": 2 and each sample block as {"rows": N, "values": [keys]}), zero'
                " padding to a multiple of 8, then the gpu and port blocks as little-endian arrays"
                " (docs/ingest-format.md, 'Version 2')",
            }
        },
    },
}

CONTENT_ENCODING: dict[str, Any] = {
    "name": "Content-Encoding",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "enum": list(ENCODINGS)},
    "description": "gzip (a complete gzip stream, one or more members) or none",
}
