"""The spooled batch still being filled while the collector is away: one file per full batch, not per tick.

During an outage the pusher puts what was sampled on disk at every back-off tick. As a batch of its own,
each tick's few snapshots would cost a spool file (and a header) and, on replay, a request; instead they
join the open batch, which is encoded again whole, under its one sequence number, and written over its
own file. Reusing the number is safe because the open batch has never been sent: the pusher closes it
before anything spooled may be sent, and a closed batch is never written again. After a crash its file
is a batch like any other, holding the last version written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuscope.exporter.events import Event
from gpuscope.exporter.snapshot import Snapshot
from gpuscope.exporter.spool import Spool
from gpuscope.exporter.wire import Origin, encode_binary

Queued = tuple[Snapshot, list[Event]]  # a snapshot with the events seen when it was taken (exporter/events.py)


def encode(origin: Origin, seq: int, taken: list[Queued]) -> bytes:
    """One batch of these snapshots, each one's events with it."""
    snapshots = [snapshot for snapshot, _ in taken]
    events = [event for _, snapshot_events in taken for event in snapshot_events]
    return encode_binary(origin, seq, snapshots, events)


@dataclass
class OpenBatch:
    seq: int
    taken: list[Queued] = field(default_factory=list)  # kept in memory to be encoded again with the next ones
    path: Path | None = None  # its spool file, once a version is written

    def store(self, spool: Spool, origin: Origin, more: list[Queued]) -> Path:
        """Write this batch with `more` added, and hold them; an OSError leaves the file and the batch as they were."""
        body = encode(origin, self.seq, self.taken + more)
        if self.path is None:
            self.path = spool.put(body)
        else:
            try:
                spool.replace(self.path, body)
            except KeyError:  # gone from the spool (cannot happen while it is the newest batch): stored afresh
                self.path = spool.put(body)
        self.taken += more
        return self.path
