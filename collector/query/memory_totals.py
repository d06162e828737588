"""Each GPU's memory size as it last reported it: the top of its memory chart, so 65 GiB used reads as
most of an 80-GB card rather than as the whole axis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection

# How far back a GPU's samples are searched for a size: its newest this many while it was up (5 minutes at
# the exporter's 5-s default). A GPU that is up reports its size with every sample or never (a GPU or an
# exporter without it), so the bound loses nothing real; without it, a GPU that never reports one had every
# sample of its day read (8,640 heap pages at 10 s: half a second for a node page of 8, in `bench
# dashboard`). Samples taken while it was down (lost: no values) are passed over, so a GPU out for an hour
# keeps its size on its chart; they cost a read each, as before.
NEWEST_SAMPLES = 60

# One index probe per GPU (gpu_id, ts descending): its newest samples up, the newest of them with a size.
_SQL = (
    "SELECT g.id, (SELECT s.fb_total_bytes FROM ("
    "   SELECT fb_total_bytes, ts FROM gpu_sample WHERE gpu_id = g.id AND ts > now() - interval '1 day' AND up"
    "   ORDER BY ts DESC LIMIT %(newest)s) AS s"
    "   WHERE s.fb_total_bytes IS NOT NULL ORDER BY s.ts DESC LIMIT 1)"
    " FROM unnest(%(gpus)s::bigint[]) AS g(id)"
)


def memory_totals(conn: Connection[Any], gpu_ids: Sequence[int]) -> dict[int, int]:
    """gpu_id -> bytes, for the GPUs that reported a size in one of their newest NEWEST_SAMPLES samples
    taken while up in the last day."""
    rows = conn.execute(_SQL, {"gpus": list(gpu_ids), "newest": NEWEST_SAMPLES}).fetchall()
    return {gpu_id: int(total) for gpu_id, total in rows if total is not None}
