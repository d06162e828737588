"""Exporters pushing through collectors on a Patroni cluster, as the exporter's pusher does (each batch
sent again with its seq until acknowledged), and the exactly-once check of what they were told."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import psycopg

from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, Snapshot
from gpuscope.exporter.wire import Origin, encode_binary
from tests.processes import RunningCollector


def gpu_of(origin: Origin) -> GpuIdentity:
    return GpuIdentity(0, f"GPU-{origin.exporter_id}", "NVIDIA H100", "00:01")


def send(collector: RunningCollector, origin: Origin, seq: int) -> httpx.Response:
    snapshot = Snapshot(time.time(), (GpuReading(gpu_of(origin), True, {"util_pct": float(seq % 100)}),), ())
    body = encode_binary(origin, seq, [snapshot], ())
    headers = {"Authorization": f"Bearer {collector.token}", "Content-Type": BINARY_CONTENT_TYPE}
    return httpx.post(f"{collector.url}/api/v1/samples", content=body, headers=headers, timeout=30)


@dataclass
class Fleet:
    """Exporters, each with the seqs the collectors acknowledged (200) and the last refusal it heard."""

    origins: list[Origin]
    collectors: tuple[RunningCollector, ...]
    acknowledged: dict[str, set[int]] = field(default_factory=dict)
    last_refusal: str = ""

    @classmethod
    def of(cls, prefix: str, exporters: int, collectors: tuple[RunningCollector, ...]) -> Fleet:
        origins = [Origin("ha", "r1", f"{prefix}-{n}", "sim", str(uuid.uuid4())) for n in range(exporters)]
        return cls(origins, collectors, {origin.exporter_id: set() for origin in origins})

    def push_round(self, seq: int) -> bool:
        """Batch `seq` from each exporter not yet acknowledged for it, all at once, through alternating collectors;
        whether every exporter's is now acknowledged. A refusal must be a 503 (never a 500, never a hang:
        httpx gives up at 30 s)."""
        waiting = [(n, o) for n, o in enumerate(self.origins) if seq not in self.acknowledged[o.exporter_id]]

        def push(item: tuple[int, Origin]) -> httpx.Response:
            return send(self.collectors[(seq + item[0]) % len(self.collectors)], item[1], seq)

        with ThreadPoolExecutor(max_workers=len(self.origins)) as pool:  # exporters push independently
            answers = list(pool.map(push, waiting))
        taken = True
        for (_, origin), answer in zip(waiting, answers, strict=True):
            if answer.status_code == 200:
                self.acknowledged[origin.exporter_id].add(seq)
            else:
                assert answer.status_code == 503, answer.text
                self.last_refusal = answer.text
                taken = False
        return taken


@dataclass(frozen=True)
class StoredCount:
    """One exporter's batches as the database has them, against what it was told."""

    exporter_id: str
    acknowledged: frozenset[int]
    stored: tuple[int, ...]  # ingest_batch's seqs, in order (a repeat would show twice)
    samples: int  # gpu_sample rows of its GPU: one per stored batch

    @property
    def lost(self) -> list[int]:
        """Acknowledged (200) and not stored: a commit acknowledged and then rewound, say."""
        return sorted(self.acknowledged - set(self.stored))

    @property
    def doubled(self) -> list[int]:
        return sorted({seq for seq in self.stored if self.stored.count(seq) > 1})

    @property
    def unacknowledged(self) -> list[int]:
        """Stored though never acknowledged: allowed (a write that finished after its deadline's 503)."""
        return sorted(set(self.stored) - self.acknowledged)

    def problems(self) -> str:
        """'' when each acknowledged batch is stored exactly once with its one sample, else what is wrong."""
        found = []
        if self.lost:
            found.append(f"ACKNOWLEDGED AND LOST: seqs {self.lost}")
        if self.doubled:
            found.append(f"stored twice: seqs {self.doubled}")
        if self.samples != len(self.stored):
            found.append(f"{self.samples} samples for {len(self.stored)} batches")
        return f"exporter {self.exporter_id}: " + "; ".join(found) if found else ""


def stored_counts(dsn: str, fleet: Fleet) -> list[StoredCount]:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        counts = []
        for origin in fleet.origins:
            seqs = tuple(
                row[0]
                for row in conn.execute(
                    "SELECT seq FROM ingest_batch WHERE exporter_id = %s ORDER BY seq", (origin.exporter_id,)
                )
            )
            samples = conn.execute(
                "SELECT count(*) FROM gpu_sample s JOIN gpu g USING (gpu_id) WHERE g.uuid = %s", (gpu_of(origin).uuid,)
            ).fetchone()
            acknowledged = frozenset(fleet.acknowledged[origin.exporter_id])
            counts.append(StoredCount(origin.exporter_id, acknowledged, seqs, samples[0] if samples else 0))
    return counts
