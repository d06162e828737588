"""Discrete events derived from consecutive snapshots: new XID errors and GPUs lost or back.

The sources report XIDs as counts since the exporter started (what /metrics serves); the collector
stores events, so the pusher turns count increases into events, one per GPU and code per snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.core.gpu_events import GPU_LOST, GPU_RECOVERED, XID
from gpuscope.exporter.snapshot import Snapshot

__all__ = ["GPU_LOST", "GPU_RECOVERED", "XID", "Event", "EventTracker"]


@dataclass(frozen=True)
class Event:
    ts: float
    gpu: int | None  # GPU index on the node; None for a node-wide event
    kind: str
    code: int | None = None  # the XID for "xid"
    count: int = 1


class EventTracker:
    """Remembers the previous snapshot's XID counts and up state of each GPU.

    GPUs are followed by index, which names the same GPU for the life of the exporter: a GPU that could
    not be opened at start has no UUID yet (""), and when it opens its "gpu_recovered" must follow. A
    different UUID at an index whose UUID was known is another GPU, followed afresh.
    """

    def __init__(self) -> None:
        self._xids: dict[int, dict[int, int]] = {}
        self._up: dict[int, bool] = {}
        self._uuids: dict[int, str] = {}

    def observe(self, snapshot: Snapshot) -> list[Event]:
        events = []
        for reading in snapshot.gpus:
            uuid, index = reading.gpu.uuid, reading.gpu.index
            if uuid:
                if self._uuids.get(index, uuid) != uuid:
                    self._up.pop(index, None)
                    self._xids.pop(index, None)
                self._uuids[index] = uuid
            was_up = self._up.get(index)
            if was_up is not None and was_up != reading.up:
                events.append(Event(snapshot.ts, index, GPU_RECOVERED if reading.up else GPU_LOST))
            self._up[index] = reading.up
            seen = self._xids.setdefault(index, {})
            for code, count in sorted(reading.xid_counts.items()):
                new = count - seen.get(code, 0)
                if new > 0:
                    events.append(Event(snapshot.ts, index, XID, code=code, count=new))
                seen[code] = count
        return events
