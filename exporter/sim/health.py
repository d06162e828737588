"""The rare faults of a simulated H100: XIDs, ECC errors and row remaps.

Incidents arrive at random (Poisson) on each GPU at a rate that gives one XID somewhere in the demo's
128 GPUs every 20 minutes or so; most are application faults, which need a job to happen. Each
incident leaves what the driver leaves: its XID codes, counted since the exporter started as the NVML
source counts them, and its marks on the ECC and row-remap counters. Corrected (single-bit) ECC errors
are silent and come mostly from a few weak GPUs. A pending row remap waits for a GPU reset, which the
scheduler's epilog does between jobs. The driver's recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
follows the incidents that need one: an XID 79 asks for a node reboot, which the simulated node never
gets, so it stays; an uncontained ECC error (XID 95) asks for a GPU reset, which the epilog does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

XID_INCIDENTS_PER_GPU_S = 1.0 / (128 * 20 * 60.0)


@dataclass(frozen=True)
class Incident:
    weight: float
    xids: tuple[int, ...]  # what the driver logs, in order
    needs_job: bool = False  # an application fault: no application, no fault
    uncorrectable: bool = False  # an uncorrectable ECC error, whose row is remapped
    correctable_remap: bool = False  # a row remapped after correctable errors
    nvlink: bool = False  # a link failed and recovered


INCIDENTS = (
    Incident(0.34, (13,), needs_job=True),  # graphics engine exception: out-of-range access in a kernel
    Incident(0.24, (31,), needs_job=True),  # MMU fault: illegal address
    Incident(0.18, (43,), needs_job=True),  # GPU stopped processing: the application was killed mid-kernel
    Incident(0.10, (74,), nvlink=True),
    Incident(0.05, (48, 63, 94), uncorrectable=True),  # contained: only the application using the row dies
    Incident(0.02, (48, 63, 95), uncorrectable=True),  # uncontained: every application on the GPU dies
    Incident(0.05, (63,), correctable_remap=True),
    Incident(0.02, (79,)),  # fell off the bus; the simulated GPU keeps answering (no fault injection here)
)
WEIGHTS = np.array([incident.weight for incident in INCIDENTS])

# NVML_GPU_RECOVERY_ACTION_*: what the driver asks after these XIDs (NVIDIA's XID catalogue: 79 RESTART_BM,
# 95 RESET_GPU); the graver wins where an incident logs both.
GPU_RESET, NODE_REBOOT = 1, 2
RECOVERY_AFTER_XID = {95: GPU_RESET, 79: NODE_REBOOT}

WEAK_GPU_SHARE = 0.1  # GPUs whose HBM sees corrected errors now and then
WEAK_CORRECTED_PER_S = 1.0 / 1800.0
SOUND_CORRECTED_PER_S = 1.0 / (30 * 86400.0)
IDLE_CORRECTED_FACTOR = 0.3  # fewer accesses, fewer errors seen


class SimGpuHealth:
    """XID counts, ECC and row-remap counters of one node's GPUs, advanced once per read."""

    def __init__(self, seed: int, node_index: int, gpus: int) -> None:
        self._rng = np.random.default_rng([seed, node_index, 0x58494E])  # its own stream: other readings keep theirs
        weak = self._rng.random(gpus) < WEAK_GPU_SHARE
        self._corrected_per_s = np.where(weak, WEAK_CORRECTED_PER_S, SOUND_CORRECTED_PER_S)
        self._ecc_corrected = self._rng.poisson(np.where(weak, 12.0, 0.0)).astype(float)  # since the driver loaded
        self._ecc_uncorrected = np.zeros(gpus)
        # Remapped rows persist across reboots: a few GPUs arrive with some.
        self._remapped_correctable = self._rng.poisson(0.15, gpus).astype(float)
        self._remapped_uncorrectable = self._rng.poisson(0.05, gpus).astype(float)
        self._remap_pending = np.zeros(gpus)
        self._recovery_action = np.zeros(gpus)
        self._xids: list[dict[int, int]] = [{} for _ in range(gpus)]

    def advance(self, job_running: bool, dt: float) -> tuple[int, ...]:
        """Incidents over the last `dt` seconds; returns the GPUs whose NVLink failed (XID 74)."""
        gpus = len(self._xids)
        if not job_running:
            self._remap_pending[:] = 0.0  # the epilog reset the GPUs
            self._recovery_action[self._recovery_action == GPU_RESET] = 0.0
        activity = 1.0 if job_running else IDLE_CORRECTED_FACTOR
        self._ecc_corrected += self._rng.poisson(self._corrected_per_s * activity * dt)
        counts = self._rng.poisson(XID_INCIDENTS_PER_GPU_S * dt, gpus)
        link_faults = []
        for gpu in np.flatnonzero(counts).tolist():  # rare: most reads skip the loop
            for choice in self._rng.choice(len(INCIDENTS), int(counts[gpu]), p=WEIGHTS).tolist():
                incident = INCIDENTS[choice]
                if incident.needs_job and not job_running:
                    continue
                self.record(gpu, incident)
                if incident.nvlink:
                    link_faults.append(gpu)
        return tuple(link_faults)

    def values(self) -> list[dict[str, float]]:
        """Per GPU: the ECC, row-remap and recovery-action values under their catalog keys."""
        columns = zip(
            self._ecc_corrected.tolist(),
            self._ecc_uncorrected.tolist(),
            self._remapped_correctable.tolist(),
            self._remapped_uncorrectable.tolist(),
            self._remap_pending.tolist(),
            self._recovery_action.tolist(),
            strict=True,
        )
        return [
            {
                "ecc_corrected": corrected,
                "ecc_uncorrected": uncorrected,
                "remapped_rows_correctable": correctable,
                "remapped_rows_uncorrectable": uncorrectable,
                "remap_pending": pending,
                "remap_failure": 0.0,  # a bank runs out of spare rows only after far more remaps than a sim sees
                "recovery_action": recovery,
            }
            for corrected, uncorrected, correctable, uncorrectable, pending, recovery in columns
        ]

    def xid_counts(self, gpu: int) -> dict[int, int]:
        """XID code -> events on GPU `gpu` since the exporter started (a copy: readings are frozen)."""
        return dict(self._xids[gpu])

    def record(self, gpu: int, incident: Incident) -> None:
        """The driver's marks of `incident` on GPU `gpu`: its XIDs, and its ECC and remap counters."""
        for xid in incident.xids:
            self._xids[gpu][xid] = self._xids[gpu].pop(xid, 0) + 1  # the last key is the latest XID
            action = RECOVERY_AFTER_XID.get(xid, 0)
            self._recovery_action[gpu] = max(self._recovery_action[gpu], action)
        if incident.uncorrectable:
            self._ecc_uncorrected[gpu] += 1
            self._remapped_uncorrectable[gpu] += 1
            self._remap_pending[gpu] = 1.0
        if incident.correctable_remap:
            self._remapped_correctable[gpu] += 1
            self._remap_pending[gpu] = 1.0
