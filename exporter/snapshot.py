"""One sampling cycle's readings: what /metrics serves and what the pusher sends."""

from __future__ import annotations

from dataclasses import dataclass, field

# The xid_counts key for XID errors the driver could not identify (NVML's eventData 999): code 0, which
# names no real XID (gpuscope/core/gpu_events.py).
from gpuscope.core.gpu_events import UNKNOWN_XID

__all__ = ["UNKNOWN_XID", "GpuIdentity", "GpuReading", "JobInfo", "MigReading", "Snapshot"]


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    uuid: str
    model: str
    pci_bus_id: str
    serial: str = ""  # the board's serial number, where the driver gives it
    part_number: str = ""  # the board's part number (AMD: e.g. 102-G30211-00), where the driver gives it


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    user: str | None = None
    # Kubernetes (exporter/jobs/kubernetes.py): the pod and container holding the device, and the workload
    # that makes them one job ("JobSet/train-7"; job_id is then "<namespace>/<workload name>"). None on Slurm.
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    workload: str | None = None
    # Slurm (deploy/slurm/prolog.sh): the job's account, where it has one, and its partition.
    account: str | None = None
    partition: str | None = None


@dataclass(frozen=True)
class PortIdentity:
    device: str  # e.g. mlx5_0
    port: int


@dataclass(frozen=True)
class MigReading:
    """One MIG device of a GPU: a compute instance in a GPU instance, as CUDA and Slurm see it.

    `values` holds "mig" catalog keys. Memory and activity belong to the GPU instance, which its
    compute instances share, so they are reported once per GPU instance: on its first compute instance.
    """

    gpu_instance_id: int
    compute_instance_id: int
    profile: str  # the GPU instance profile, e.g. "1g.10gb"
    uuid: str  # the MIG device's own UUID ("MIG-..."), what CUDA_VISIBLE_DEVICES names
    slices: int  # compute slices of this MIG device (3 for 3g.40gb, 1 for a 1c.3g.40gb compute instance)
    gpu_slices: int  # compute slices of the whole GPU (7 on A100 and H100, 4 on A30)
    values: dict[str, float] = field(default_factory=dict)

    @property
    def instance_slices(self) -> int:
        """Slices of its GPU instance, from the profile's name ("3g.40gb": 3)."""
        return int(self.profile.split("g.", 1)[0])


@dataclass(frozen=True)
class GpuReading:
    gpu: GpuIdentity
    up: bool
    # Catalog key -> value in the catalog's native unit. A field the device does not
    # support is absent, never 0 or NaN.
    values: dict[str, float] = field(default_factory=dict)
    links: dict[int, dict[str, float]] = field(default_factory=dict)  # NVLink/XGMI link -> "nvlink" metrics
    # XID code -> events since the exporter started, in the order last seen: the last key is the latest XID
    xid_counts: dict[int, int] = field(default_factory=dict)
    mig: tuple[MigReading, ...] = ()  # the GPU's MIG devices when it is in MIG mode


@dataclass(frozen=True)
class PortReading:
    port: PortIdentity
    values: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    ts: float  # seconds since the Unix epoch, when the cycle started
    gpus: tuple[GpuReading, ...]
    ports: tuple[PortReading, ...]
    sample_seconds: float = 0.0  # how long the cycle took
    jobs: dict[int, JobInfo] | None = None  # GPU index -> job; None when no job attribution is configured
    mig_jobs: dict[str, JobInfo] | None = None  # MIG device UUID -> job, where attribution can tell instances apart
    driver_version: str = ""  # the kernel driver's version, as the backend reports it ("" when unknown)
