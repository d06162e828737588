"""Keeps job_allocation in step with what exporters report, inside the batch's transaction.

For each GPU, the batch's rows (in time order) form runs of the same job. The first run continues the
GPU's open allocation if it is the same job; any change of job closes the open allocation at the
first sample showing the change and opens the next one. MIG devices are followed the same way, each on
its own, and their allocations keep their parent GPU. Batches can arrive late or twice: rows older
than an allocation's last_seen never reopen or shorten it.

A batch's runs are worked out with numpy and written with three statements whatever their number (the
open allocations locked and read, then updated, then the new ones inserted), so the cost of a batch
does not grow with a statement per run; ingest caps runs per GPU per batch (ingest/batch.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from psycopg import AsyncConnection

from gpuscope.collector.store.batch import Batch, JobRef, Samples

# An exporter silent this long no longer vouches for its allocations: they end at their last sighting.
STALE_AFTER = timedelta(minutes=5)
NO_JOB = -1
MAX_GPU_INDEX = 4096

# Times travel as integer microseconds since the epoch (exact, and compared as stored); -1: none.
_UPDATE_OPEN = (
    "UPDATE job_allocation AS a SET"
    " last_seen = CASE WHEN u.seen >= 0 THEN timestamptz 'epoch' + u.seen * interval '1 microsecond'"
    "  ELSE a.last_seen END,"
    " ended_at = CASE WHEN u.ended >= 0"
    "  THEN greatest(timestamptz 'epoch' + u.ended * interval '1 microsecond', a.started_at) END"
    " FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS u(id, seen, ended)"
    " WHERE a.allocation_id = u.id"
)
_INSERT_NEW = (
    "INSERT INTO job_allocation (job_id, username, namespace, pod, container, workload, account, partition,"
    "  node_id, gpu_id, mig_id, started_at, last_seen, ended_at)"
    " SELECT job_id, username, namespace, pod, container, workload, account, partition, %s, gpu_id, mig_id,"
    "  timestamptz 'epoch' + first_us * interval '1 microsecond',"
    "  timestamptz 'epoch' + last_us * interval '1 microsecond',"
    "  CASE WHEN next_us >= 0 THEN timestamptz 'epoch' + next_us * interval '1 microsecond' END"
    " FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],"
    "  %s::int[], %s::int[], %s::bigint[], %s::bigint[], %s::bigint[])"
    "  AS r(job_id, username, namespace, pod, container, workload, account, partition, gpu_id, mig_id,"
    "       first_us, last_us, next_us)"
)


@dataclass(frozen=True)
class Runs:
    """Runs of consecutive rows (per GPU, in time order) with the same job, sorted by GPU then time."""

    gpu: np.ndarray  # GPU index
    job: np.ndarray  # a position in Batch.jobs (the first with that job id), or NO_JOB
    sent: np.ndarray  # the position the run's first row gave (its user is the allocation's)
    first_us: np.ndarray  # the run's first and last sample
    last_us: np.ndarray
    next_us: np.ndarray  # the first sample of the GPU's next run; -1: this is its last run
    first_of_gpu: np.ndarray  # bool


def holder(job: JobRef) -> tuple[str, str | None, str | None]:
    """What an allocation is of: the job, and on Kubernetes the pod and container in it (a pod replaced
    under the same job, a JobSet restarting, starts an allocation of its own)."""
    return job.job_id, job.pod, job.container


def job_runs(ts: np.ndarray, device: np.ndarray, job: np.ndarray, job_keys: Sequence[Hashable]) -> Runs:
    """`job`: per row a position in the batch's jobs, or -1. Positions with the same key (holder()) are
    one job (so a run is not cut where only the user differs)."""
    first_position = {key: n for n, key in reversed(list(enumerate(job_keys)))}
    canonical = np.array([first_position[k] for k in job_keys] + [NO_JOB], dtype=np.int64)
    order = np.lexsort((ts, device))
    dev = device[order]
    sent = job[order]
    jobs = canonical[sent]  # -1 indexes the NO_JOB at the end
    us = np.rint(ts[order] * 1e6).astype(np.int64)
    new_gpu = np.r_[True, dev[1:] != dev[:-1]]
    starts = np.flatnonzero(new_gpu | np.r_[True, jobs[1:] != jobs[:-1]])
    ends = np.r_[starts[1:], len(dev)] - 1
    gpu = dev[starts]
    first_us = us[starts]
    same_gpu_next = np.r_[gpu[1:] == gpu[:-1], False]
    return Runs(
        gpu=gpu,
        job=jobs[starts],
        sent=sent[starts],
        first_us=first_us,
        last_us=us[ends],
        next_us=np.where(same_gpu_next, np.r_[first_us[1:], -1], -1),
        first_of_gpu=new_gpu[starts],
    )


async def record(conn: AsyncConnection[Any], node_id: int, gpu_ids: dict[int, int], batch: Batch) -> None:
    """The allocations of whole GPUs, from the GPU rows' jobs."""
    samples = batch.gpu_samples
    if samples.job is None or len(samples) == 0:
        return
    gpu_of = np.full(MAX_GPU_INDEX, -1, dtype=np.int64)  # GPU index -> gpu_id
    for index, gpu_id in gpu_ids.items():
        gpu_of[index] = gpu_id
    await _record_runs(conn, node_id, batch, samples, gpu_of, None)


async def record_mig(
    conn: AsyncConnection[Any], node_id: int, gpu_ids: dict[int, int], mig_ids: Sequence[int], batch: Batch
) -> None:
    """The allocations of MIG devices, from the MIG rows' jobs: each with its parent GPU."""
    samples = batch.mig_samples
    if samples is None or samples.job is None or len(samples) == 0:
        return
    gpu_of = np.array([gpu_ids[m.gpu] for m in batch.migs], dtype=np.int64)  # position in migs -> parent gpu_id
    await _record_runs(conn, node_id, batch, samples, gpu_of, np.array(mig_ids, dtype=np.int64))


# The open allocations of the batch's devices, locked for the rest of the transaction: whole GPUs, or MIG
# devices. Each row: the device's id, then the allocation.
_OPEN_OF_GPUS = (
    "SELECT gpu_id, allocation_id, job_id, pod, container, (extract(epoch FROM last_seen) * 1000000)::bigint"
    " FROM job_allocation WHERE gpu_id = ANY(%s) AND mig_id IS NULL AND ended_at IS NULL ORDER BY gpu_id FOR UPDATE"
)
_OPEN_OF_MIGS = (
    "SELECT mig_id, allocation_id, job_id, pod, container, (extract(epoch FROM last_seen) * 1000000)::bigint"
    " FROM job_allocation WHERE mig_id = ANY(%s) AND ended_at IS NULL ORDER BY mig_id FOR UPDATE"
)


async def _record_runs(
    conn: AsyncConnection[Any],
    node_id: int,
    batch: Batch,
    samples: Samples,
    gpu_of: np.ndarray,
    mig_of: np.ndarray | None,
) -> None:
    """`samples.device` is a position in `gpu_of` (the gpu_id of each device) and, for MIG devices, in
    `mig_of` (their mig_id); None: the devices are whole GPUs."""
    assert samples.job is not None
    keys = [holder(j) for j in batch.jobs]
    runs = job_runs(samples.ts, samples.device, samples.job, keys)
    device_ids = gpu_of if mig_of is None else mig_of
    listed = np.flatnonzero(device_ids >= 0)
    cur = await conn.execute(_OPEN_OF_GPUS if mig_of is None else _OPEN_OF_MIGS, (sorted(device_ids[listed].tolist()),))
    id_to_device = {int(device_ids[d]): int(d) for d in listed}
    job_position = {key: n for n, key in reversed(list(enumerate(keys)))}
    size = len(device_ids)
    open_id = np.full(size, -1, dtype=np.int64)
    open_job = np.full(size, -2, dtype=np.int64)  # -2: a job not in this batch
    open_last = np.full(size, -1, dtype=np.int64)
    for device_id, allocation_id, job_id, pod, container, last_us in await cur.fetchall():
        device = id_to_device[device_id]
        open_id[device], open_last[device] = allocation_id, last_us
        open_job[device] = job_position.get((job_id, pod, container), -2)

    has_open = open_id[runs.gpu] >= 0
    # Old news (a late or repeated batch): runs that end no later than the open allocation was last seen.
    # In time order these are the first runs of a device, so the runs kept are the rest.
    kept = ~(has_open & (runs.last_us <= open_last[runs.gpu]))
    first_kept = kept & (runs.first_of_gpu | ~np.r_[False, kept[:-1]])
    meets_open = first_kept & has_open
    continues = meets_open & (runs.job != NO_JOB) & (runs.job == open_job[runs.gpu])

    # The open allocation a device's first kept run meets: continued (seen until that run's end, and ended
    # where the next run starts, if one does), or ended where that run starts.
    if meets_open.any():
        ends = np.where(continues, runs.next_us, runs.first_us)[meets_open]
        seen = np.where(continues, runs.last_us, -1)[meets_open]
        await conn.execute(
            _UPDATE_OPEN,
            (open_id[runs.gpu[meets_open]].tolist(), seen.tolist(), ends.tolist()),
        )

    # Every other kept run of a job is an allocation of its own, ended where the device's next run starts.
    new = kept & (runs.job != NO_JOB) & ~continues
    if new.any():
        sent = [batch.jobs[p] for p in runs.sent[new].tolist()]
        devices = runs.gpu[new]
        await conn.execute(
            _INSERT_NEW,
            (
                node_id,
                [j.job_id for j in sent],
                [j.user for j in sent],
                [j.namespace for j in sent],
                [j.pod for j in sent],
                [j.container for j in sent],
                [j.workload for j in sent],
                [j.account for j in sent],
                [j.partition for j in sent],
                gpu_of[devices].tolist(),
                [None] * len(sent) if mig_of is None else mig_of[devices].tolist(),
                runs.first_us[new].tolist(),
                runs.last_us[new].tolist(),
                runs.next_us[new].tolist(),
            ),
        )


async def expire_stale(conn: AsyncConnection[Any], now: datetime | None = None) -> int:
    """Close open allocations whose GPU has not been reported for STALE_AFTER; returns how many."""
    cur = await conn.execute(
        "UPDATE job_allocation SET ended_at = last_seen WHERE ended_at IS NULL AND last_seen < %s",
        ((now or datetime.now(UTC)) - STALE_AFTER,),
    )
    return cur.rowcount
