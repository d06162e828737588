"""Each GPU's memory size as it last reported it: the top of its memory chart, so 65 GiB used reads as
most of an 80-GB card rather than as the whole axis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection

# One index probe per GPU (gpu_id, ts descending), newest sample that carried a size.
_SQL = (
    "SELECT g.id, (SELECT s.fb_total_bytes FROM gpu_sample s WHERE s.gpu_id = g.id AND s.fb_total_bytes IS NOT NULL"
    "   AND s.ts > now() - interval '1 day' ORDER BY s.ts DESC LIMIT 1)"
    " FROM unnest(%s::bigint[]) AS g(id)"
)


def memory_totals(conn: Connection[Any], gpu_ids: Sequence[int]) -> dict[int, int]:
    """gpu_id -> bytes, for the GPUs that reported a size in the last day."""
    rows = conn.execute(_SQL, (list(gpu_ids),)).fetchall()
    return {gpu_id: int(total) for gpu_id, total in rows if total is not None}
