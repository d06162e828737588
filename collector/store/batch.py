"""What the store writes: one decoded batch from one exporter, whatever wire format it came in."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    model: str
    pci_bus_id: str


@dataclass(frozen=True)
class PortInfo:
    device: str
    port: int


@dataclass(frozen=True)
class MigInfo:
    """A MIG device of GPU `gpu` (its index): a compute instance in a GPU instance."""

    gpu: int
    gpu_instance_id: int
    compute_instance_id: int
    uuid: str
    profile: str  # the GPU instance profile, "3g.40gb"
    slices: int  # compute slices of this MIG device
    gpu_slices: int  # compute slices of the whole GPU: slices / gpu_slices is the device's share


@dataclass(frozen=True)
class JobRef:
    job_id: str
    user: str | None
    # Kubernetes: the pod (and container) holding the GPU and its workload ("JobSet/train-7"); None elsewhere
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    workload: str | None = None
    # Slurm: the job's account and partition (the prolog's file); None elsewhere
    account: str | None = None
    partition: str | None = None


@dataclass(frozen=True)
class EventIn:
    ts: float
    gpu: int | None  # GPU index, or None for the node
    kind: str
    code: int | None
    count: int
    message: str | None


@dataclass(frozen=True)
class Samples:
    ts: np.ndarray  # float64 seconds since the epoch
    device: np.ndarray  # int: GPU index, or position in `ports` (in `migs`)
    # column key -> float64 (NaN: not reported); integer columns int64 (columns.NULL_INT: not reported)
    values: dict[str, np.ndarray]
    up: np.ndarray | None = None  # bool, GPUs only
    job: np.ndarray | None = None  # int position in Batch.jobs, -1 for no job; None: attribution not reported

    def __len__(self) -> int:
        return len(self.ts)


@dataclass(frozen=True)
class Batch:
    exporter_id: uuid.UUID
    seq: int
    cluster: str
    rack: str
    node: str
    backend: str
    gpus: tuple[GpuInfo, ...]
    ports: tuple[PortInfo, ...]
    gpu_samples: Samples
    port_samples: Samples
    jobs: tuple[JobRef, ...]
    ignored_fields: tuple[str, ...]  # metric keys this collector does not know (newer exporter)
    events: tuple[EventIn, ...] = ()
    migs: tuple[MigInfo, ...] = ()
    mig_samples: Samples | None = None  # None: the sender reports no MIG devices
