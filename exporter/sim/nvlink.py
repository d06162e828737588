"""NVLink on a simulated H100 SXM: 18 NVLink4 links per GPU, their data counters and link-error counters.

Data: the GPUs of a node exchange the same volume every step (all-reduce, tensor-parallel or all-to-all
traffic through the NVSwitches, spread evenly over the links), so bytes per second follow the step
rate and how communication-heavy the job is; an idle GPU moves nothing. NVML counts data in KiB since
the driver was loaded.

Errors follow a bit-error model: almost every link is clean, a few marginal ones see CRC errors in
proportion to the bytes they carry, each CRC error is replayed, and a link recovery (retraining) is
rarer still. An NVLink XID (74) is a link recovery too.
"""

from __future__ import annotations

import numpy as np

from gpuscope.exporter.sim.jobs import JobRun

LINKS_PER_GPU = 18
LINK_PEAK_BYTES_PER_S = 25e9  # NVLink4: 25 GB/s per link per direction, 450 GB/s per H100
MAX_LINK_SHARE = 0.96  # protocol overhead: data never fills the link
KIB = 1024.0

# Share of peak a job of each kind drives at full step rate, (low, high): the job draws within it.
LOAD_BY_JOB = {
    "llama-pretrain": (0.55, 0.9),  # tensor parallel inside the node: all-reduces in every layer
    "moe-sft": (0.5, 0.85),  # expert all-to-all
    "rlhf-ppo": (0.25, 0.55),
    "diffusion-xl": (0.15, 0.35),
    "vit-finetune": (0.1, 0.3),  # data parallel: one gradient all-reduce per step
    "bert-eval": (0.01, 0.05),  # inference: hardly any collectives
}
DEFAULT_LOAD = (0.2, 0.5)

MARGINAL_LINK_SHARE = 0.02  # links with a weak lane or connector
MARGINAL_CRC_PER_BYTE = (1e-17, 1e-15)  # log-uniform: at full rate, one CRC error a day to a few an hour
CRC_DATA_SHARE = 0.1  # of CRC errors, those in data rather than flit headers
RECOVERY_PER_CRC = 0.002

# The GPU-wide sums of the per-link values, in _link_dicts' order, as NVML's source adds them up.
TOTAL_KEYS = (
    "nvlink_tx_bytes",
    "nvlink_rx_bytes",
    "nvlink_crc_errors",
    "nvlink_replay_errors",
    "nvlink_recovery_errors",
)


class SimNvLink:
    """Per-link counters of one node's GPUs, advanced once per read."""

    def __init__(self, seed: int, node_index: int, gpus: int) -> None:
        self._rng = np.random.default_rng([seed, node_index, 0x4E564C])  # its own stream: other readings keep theirs
        shape = (gpus, LINKS_PER_GPU)
        self._balance = 1.0 + self._rng.uniform(-0.03, 0.03, shape)  # the switches' routing is almost even
        self._rx_over_tx = 1.0 + self._rng.uniform(-0.005, 0.005, shape)
        marginal = self._rng.random(shape) < MARGINAL_LINK_SHARE
        self._marginal = np.nonzero(marginal)  # clean links see no CRC errors in any span a sim runs
        low, high = np.log10(MARGINAL_CRC_PER_BYTE)
        self._crc_per_byte = 10 ** self._rng.uniform(low, high, len(self._marginal[0]))
        since_load = self._rng.uniform(1e12, 2e14, (gpus, 1))  # the driver was loaded a while ago
        self._tx = since_load * self._balance
        self._rx = self._tx * self._rx_over_tx
        self._crc_flit = self._rng.poisson(np.where(marginal, 3.0, 0.0)).astype(float)
        self._crc_data = np.zeros(shape)
        self._replay = self._crc_flit.copy()
        self._recovery = np.zeros(shape)
        self._job_load: tuple[str, float] | None = None

    def advance(self, job: JobRun | None, busy: np.ndarray | None, dt: float, link_faults: tuple[int, ...]) -> None:
        """Traffic and errors over the last `dt` seconds; `link_faults`: GPUs whose link failed (XID 74)."""
        gpus = self._tx.shape[0]
        if job is None or busy is None or gpus < 2:
            sent = np.zeros_like(self._tx)
        else:
            # The same bytes every step: faster steps, more bytes per second (busy ~ step rate).
            share = self._load(job) * float(busy.mean()) * (1.0 + self._rng.normal(0.0, 0.02, self._tx.shape))
            rate = LINK_PEAK_BYTES_PER_S * np.clip(share * self._balance, 0.0, MAX_LINK_SHARE)
            sent = rate * dt
        self._tx += sent
        self._rx += sent * self._rx_over_tx
        links = self._marginal
        expected = (sent[links] * (1.0 + self._rx_over_tx[links])) * self._crc_per_byte
        flit, data, recovery = self._rng.poisson(
            expected * np.array([1.0 - CRC_DATA_SHARE, CRC_DATA_SHARE, RECOVERY_PER_CRC])[:, None]
        )
        self._crc_flit[links] += flit
        self._crc_data[links] += data
        self._replay[links] += flit + data  # the receiver asks for every corrupted flit again
        self._recovery[links] += recovery
        for gpu in link_faults:
            link = int(self._rng.integers(LINKS_PER_GPU))
            self._recovery[gpu, link] += 1
            self._replay[gpu, link] += 1 + int(self._rng.poisson(4.0))

    def readings(self) -> list[tuple[dict[str, float], dict[int, dict[str, float]]]]:
        """Per GPU: its NVLink totals (catalog "gpu" keys) and per-link values, as the NVML source reports them."""
        per_link = np.stack(
            (
                np.floor(self._tx / KIB) * KIB,
                np.floor(self._rx / KIB) * KIB,
                self._crc_flit + self._crc_data,
                self._replay,
                self._recovery,
            ),
            axis=-1,
        )  # (gpus, links, LINK_KEYS)
        totals = per_link.sum(axis=1).tolist()
        flit, data = self._crc_flit.sum(axis=1).tolist(), self._crc_data.sum(axis=1).tolist()
        return [
            (
                {
                    **dict(zip(TOTAL_KEYS, gpu_totals, strict=True)),
                    "nvlink_crc_flit_errors": gpu_flit,
                    "nvlink_crc_data_errors": gpu_data,
                },
                _link_dicts(gpu_links),
            )
            for gpu_totals, gpu_links, gpu_flit, gpu_data in zip(totals, per_link.tolist(), flit, data, strict=True)
        ]

    def _load(self, job: JobRun) -> float:
        """The job's share of peak, the same for the whole job (cached: jobs last many reads)."""
        if self._job_load is None or self._job_load[0] != job.job_id:
            low, high = LOAD_BY_JOB.get(job.name, DEFAULT_LOAD)
            self._job_load = (job.job_id, float(np.random.default_rng([int(job.job_id), 0x4E56]).uniform(low, high)))
        return self._job_load[1]


def _link_dicts(rows: list[list[float]]) -> dict[int, dict[str, float]]:
    # Spelled out rather than zip(LINK_KEYS, ...): twice as fast, and this runs for 144 links a read.
    return {
        link: {
            "link_tx_bytes": tx,
            "link_rx_bytes": rx,
            "link_crc_errors": crc,
            "link_replay_errors": replay,
            "link_recovery_errors": recovery,
            "link_ecc_errors": 0.0,  # data ECC errors a Hopper link corrects: none on these simulated links
        }
        for link, (tx, rx, crc, replay, recovery) in enumerate(rows)
    }
