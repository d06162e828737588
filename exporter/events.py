"""Discrete events derived from consecutive snapshots: new XID errors and GPUs lost or back.

The sources report XIDs as counts since the exporter started (what /metrics serves); the collector
stores events, so the pusher turns count increases into events, one per GPU and code per snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.exporter.snapshot import Snapshot

XID = "xid"
GPU_LOST = "gpu_lost"
GPU_RECOVERED = "gpu_recovered"


@dataclass(frozen=True)
class Event:
    ts: float
    gpu: int | None  # GPU index on the node; None for a node-wide event
    kind: str
    code: int | None = None  # the XID for "xid"
    count: int = 1


class EventTracker:
    """Remembers the previous snapshot's XID counts and up states of each GPU (by UUID)."""

    def __init__(self) -> None:
        self._xids: dict[str, dict[int, int]] = {}
        self._up: dict[str, bool] = {}

    def observe(self, snapshot: Snapshot) -> list[Event]:
        events = []
        for reading in snapshot.gpus:
            uuid, index = reading.gpu.uuid, reading.gpu.index
            was_up = self._up.get(uuid)
            if was_up is not None and was_up != reading.up:
                events.append(Event(snapshot.ts, index, GPU_RECOVERED if reading.up else GPU_LOST))
            self._up[uuid] = reading.up
            seen = self._xids.setdefault(uuid, {})
            for code, count in sorted(reading.xid_counts.items()):
                new = count - seen.get(code, 0)
                if new > 0:
                    events.append(Event(snapshot.ts, index, XID, code=code, count=new))
                seen[code] = count
        return events
