"""Health episodes and repair outcomes in words, for `gpuscope health episodes | episode | repairs`: tables
with aligned columns from the health API's JSON (health/api.py), times in UTC as the API gives them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

UNKNOWN = "?"  # failed again: not known yet (still open, or the window has not passed)
EPISODE_COLUMNS = ("when (UTC)", "node", "GPU", "cause", "repair", "out for", "GPU-h", "outcome",
                   "failed again 7 d/30 d")  # fmt: skip
REPAIR_COLUMNS = ("cause", "repair", "returned", "held 7 d", "failed 7 d", "too early 7 d", "held rate 7 d",
                  "held 30 d", "failed 30 d", "held rate 30 d")  # fmt: skip


def episodes_words(window: str, episodes: list[dict[str, Any]]) -> str:
    if not episodes:
        return f"no episode in {window}"
    rows = [
        [
            _minute(e["started_at"]),
            f"{e['cluster']}/{e['node']}",
            _dash(e["gpu"]) + (" (GPU out)" if e["scope"] == "gpu" else ""),
            e["cause"],
            _dash(e["repair"]),
            duration(e["out_s"]),
            f"{e['gpu_hours']:.1f}",
            e["outcome"],
            f"{_yes(e['failed_again_7d'])}/{_yes(e['failed_again_30d'])}",
        ]
        for e in episodes
    ]
    notes = {i: f"failed test: {e['failed_test']}" for i, e in enumerate(episodes) if e.get("failed_test")}
    head = f"Episodes in {window}, newest first: {len(episodes)} ({UNKNOWN}: not known yet)"
    return "\n".join([head, *columns(EPISODE_COLUMNS, rows, notes)])


def episode_words(record: dict[str, Any]) -> str:
    e = record
    gpu = "the node" if e["gpu"] is None else f"GPU {e['gpu']} ({e['gpu_uuid']})"
    dry = " (dry run)" if e["dry_run"] else ""
    lines = [
        f"Episode {e['episode_id']}: {e['cluster']}/{e['node']}, {gpu}, {e['scope']} scope{dry}",
        f"  cause: {e['cause']}: {e['cause_detail']}",
        f"  started {e['started_at']}, out {_dash(e['out_at'])}, back {_dash(e['back_at'])}: {e['outcome']}",
        f"  out for {duration(e['out_s'])}, {e['gpus_out']} GPU(s): {e['gpu_hours']:.1f} GPU-hours",
        f"  repair: {_dash(e['repair'])}" + ("" if e["rung"] is None else f" (ladder step {e['rung'] + 1})")
        + (f": {e['repair_reason']}" if e["repair_reason"] else ""),
        f"  repair result: {_dash(e['repair_result'])}",
        f"  validation: {_dash(e['validation'])}" + (f"; failed test: {e['failed_test']}" if e["failed_test"] else ""),
        f"  failed again within 7 d: {_yes(e['failed_again_7d'])}, within 30 d: {_yes(e['failed_again_30d'])}"
        + (f" (episode {e['next_episode_id']})" if e["next_episode_id"] else ""),
    ]  # fmt: skip
    shown, found = len(record["evidence"]), record["evidence_count"]
    lines.append(f"Evidence, newest first: {found}" + (f" (the newest {shown} shown)" if shown < found else ""))
    lines += [f"  {f['at']}  {f['severity']:<9} {f['detail']}" for f in record["evidence"]] or ["  none"]
    lines.append(f"Scheduler actions, newest first: {len(record['actions'])}")
    lines += [f"  {a['at']}  {a['action']}{' (dry run: not run)' if a['dry_run'] else ''}: {a['detail']}"
              for a in record["actions"]] or ["  none"]  # fmt: skip
    return "\n".join(lines)


def repairs_words(window: str, repairs: list[dict[str, Any]]) -> str:
    if not repairs:
        return f"no failure came back into service in {window}"
    rows = [
        [r["cause"], _dash(r["repair"]), str(r["returned"]), str(r["held_7d"]), str(r["failed_7d"]),
         str(r["too_early_7d"]), rate(r["held_rate_7d"]), str(r["held_30d"]), str(r["failed_30d"]),
         rate(r["held_rate_30d"])]
        for r in repairs
    ]  # fmt: skip
    head = f"Repairs of the failures back in service in {window}, by cause (held: no failure again in the days)"
    return "\n".join([head, *columns(REPAIR_COLUMNS, rows)])


def columns(header: Sequence[str], rows: list[list[str]], notes: dict[int, str] | None = None) -> list[str]:
    """Each row's cells padded to the widest of their column; a note under its row."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()

    out = [line(header)]
    for i, row in enumerate(rows):
        out.append(line(row))
        if notes and i in notes:
            out.append(f"    {notes[i]}")
    return out


def duration(seconds: float | None) -> str:
    """How long, as an operator says it: 45 min, 11 h 50 min, 3 d 4 h; '-': never out."""
    if seconds is None:
        return "-"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 24 * 60:
        return f"{minutes // 60} h {minutes % 60} min"
    hours = round(seconds / 3600)
    return f"{hours // 24} d {hours % 24} h"


def rate(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _minute(at: str) -> str:
    """The API's ISO time to the minute: 2026-12-01T12:00:00Z -> 2026-12-01 12:00."""
    return at[:16].replace("T", " ")


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _yes(value: bool | None) -> str:
    return UNKNOWN if value is None else ("yes" if value else "no")
