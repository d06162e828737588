"""`gpuscope jobstats JOBID` (one job's report, as Slurm users know it from jobstats) and `gpuscope reports
usage|grid-load`, through a collector's API."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpuscope.core.collector_client import DEFAULT_COLLECTOR, collector_client, refused
from gpuscope.core.range_presets import PRESETS_S
from gpuscope.reports.text import one_line
from gpuscope.reports.verdicts import verdicts

DIMENSIONS = ("user", "account", "partition", "namespace", "model", "job")


def add_parser(commands: Any) -> None:
    jobstats = commands.add_parser("jobstats", help="one job's efficiency report: per GPU, with verdicts")
    jobstats.add_argument("job", metavar="JOBID", help="the job's id (a Kubernetes job: NAMESPACE/WORKLOAD)")
    _client_options(jobstats, "read token")
    jobstats.set_defaults(run=_run_jobstats)

    reports = commands.add_parser("reports", help="usage reports: GPU-hours, energy, cost and carbon")
    sub = reports.add_subparsers(dest="reports_command", required=True, metavar="ACTION")
    usage = sub.add_parser("usage", help="usage by user, account, partition, namespace, model or job")
    usage.add_argument("--by", choices=DIMENSIONS, default="user", help="group by (default user)")
    window = usage.add_mutually_exclusive_group()
    window.add_argument("--days", type=float, default=7, help="the last N days (default 7)")
    window.add_argument("--range", type=_range, help=f"as in the UI: {', '.join(PRESETS_S)}, or FROM..TO in UTC")
    _client_options(usage, "read token")
    usage.set_defaults(run=_run_usage)
    grid = sub.add_parser("grid-load", help="load the grid's carbon intensity: CSV lines 'TIME,G_PER_KWH'")
    grid.add_argument("file", type=Path, help="CSV: an RFC 3339 time with offset, grams of CO2 per kWh")
    _client_options(grid, "admin token")
    grid.set_defaults(run=_run_grid_load)


def _client_options(parser: argparse.ArgumentParser, which_token: str) -> None:
    parser.add_argument("--collector", metavar="URL", default=DEFAULT_COLLECTOR, help=f"(default {DEFAULT_COLLECTOR})")
    parser.add_argument("--token-file", type=Path, help=f"the collector's {which_token}")
    if which_token.startswith("read"):  # what reads can print as JSON
        parser.add_argument("--json", action="store_true", help="print the API's JSON")


def _run_jobstats(args: argparse.Namespace) -> int:
    url = f"{args.collector.rstrip('/')}/api/v1/reports/jobs/{quote(args.job, safe='')}"
    with collector_client(args.collector, args.token_file, timeout_s=60) as client:
        response = client.get(url)
    if refused(response):
        return 1
    report = response.json()
    print(json.dumps(report, indent=2) if args.json else job_text(report))
    return 0


def job_text(report: dict[str, Any]) -> str:
    """The report as jobstats prints one: the job, its figures, a line per GPU, then the verdicts."""
    f = report
    end = f["end"] or "running"
    basis = {"sm_active": "SM activity", "util": "utilisation", "mixed": "SM activity or utilisation"}
    where = "   ".join(f"{k.title()}: {one_line(f[k])}" for k in ("account", "partition", "namespace") if f[k])
    lines = [
        "=" * 78,
        f"  Job {one_line(f['job'], limit=400)}   User: {one_line(f['user'], missing='-')}   {where}".rstrip(),
        f"  Start: {f['start']}   End: {end}   GPUs: {f['gpus']}",
        f"  GPU-hours: {f['gpu_hours_allocated']:.2f} allocated, {f['gpu_hours_active']:.2f} active"
        f" ({basis.get(f['active_basis'], 'no activity readings')}), {f['gpu_hours_idle']:.2f} held idle",
        f"  Energy: {f['energy_kwh']:.2f} kWh   CO2: {f['co2_kg']:.2f} kg   Cost: "
        + ("no price configured" if f["cost"] is None else _money(f["cost"], f.get("currency"))),
        "-" * 78,
        f"  {'node':<16} {'gpu':>4} {'util %':>7} {'SM %':>6} {'tensor %':>8} {'mem max':>9} {'power W':>8}"
        f" {'kWh':>7} {'idle h':>7}",
    ]
    for g in f["per_gpu"]:
        gpu = f"{g['gpu']}" + (f"/{g['mig_profile']}" if g["mig_profile"] else "")
        node = one_line(g["node"])[:16]
        lines.append(
            f"  {node:<16} {gpu:>4} {_pct(g['util_mean_pct']):>7} {_pct(g['sm_active_mean_pct']):>6}"
            f" {_pct(g['tensor_active_mean_pct']):>8} {_bytes(g['mem_max_bytes']):>9}"
            f" {_num(g['power_mean_w'], 0):>8} {g['energy_kwh']:>7.2f} {g['idle_hours']:>7.1f}"
        )
    found = verdicts(report)
    lines += ["-" * 78, "  Notes:" if found else "  Notes: none: the GPUs were kept busy."]
    lines += [f"  * {line}" for line in found]
    lines.append("=" * 78)
    return "\n".join(lines)


def _range(text: str) -> str:
    # Imported here: the query package needs psycopg, which a GPU node's install (the exporter, this same
    # command) does not have. tests/test_packaging.py runs `gpuscope exporter --help` on such an install.
    from gpuscope.collector.query.range_keys import checked_key

    try:
        return checked_key(text, timedelta(days=800))  # the read API's longest range
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run_usage(args: argparse.Namespace) -> int:
    if not 0 < args.days <= 800:
        print("--days must be more than 0 and at most 800", file=sys.stderr)
        return 2
    params: dict[str, Any] = {"by": args.by}
    params |= {"range": args.range} if args.range else {"minutes": max(1, round(args.days * 1440))}
    with collector_client(args.collector, args.token_file, timeout_s=60) as client:
        response = client.get(f"{args.collector.rstrip('/')}/api/v1/reports/usage", params=params)
    if refused(response):
        return 1
    body = response.json()
    print(json.dumps(body, indent=2) if args.json else usage_text(body))
    return 0


def usage_text(body: dict[str, Any]) -> str:
    """The usage report as a table: the window counted (and the edges counted as whole hours, where the
    minute rollups are gone), a line per key, then all; the cost in the site's currency, as the page says it."""
    lines = [f"{body['start']} to {body['end']}, by {body['by']}"]
    lines += [
        f"whole hours only from {span['start']} to {span['end']}: the minute rollups there are past their retention"
        for span in body.get("hours_only", [])
    ]
    cost_header = f"cost ({one_line(body['currency'])})" if body.get("currency") else "cost"
    lines.append(
        f"{body['by']:<24} {'jobs':>6} {'allocated':>10} {'active':>9} {'idle':>9} {'kWh':>9} {'CO2 kg':>8}"
        f" {cost_header:>10}"
    )
    for row in [*body["rows"], {**body["totals"], "key": "(all)"}]:
        cost = "-" if row["cost"] is None else f"{row['cost']:.2f}"
        key = one_line(row["key"])[:24]
        lines.append(
            f"{key:<24} {row['jobs']:>6} {row['gpu_hours_allocated']:>10.1f} {row['gpu_hours_active']:>9.1f}"
            f" {row['gpu_hours_idle']:>9.1f} {row['energy_kwh']:>9.1f} {row['co2_kg']:>8.1f} {cost:>10}"
        )
    return "\n".join(lines)


def _run_grid_load(args: argparse.Namespace) -> int:
    try:
        points = read_grid_csv(args.file)
    except (OSError, ValueError) as exc:
        print(f"{args.file}: {exc}", file=sys.stderr)
        return 2
    with collector_client(args.collector, args.token_file, timeout_s=60) as client:
        response = client.put(f"{args.collector.rstrip('/')}/api/v1/reports/grid", json=points)
    if refused(response):
        return 1
    print(f"loaded {response.json()['loaded']} grid intensity values")
    return 0


def read_grid_csv(path: Path) -> list[dict[str, Any]]:
    """'TIME,G_PER_KWH' lines (a header line is skipped); a bad line is refused with its number, and a file
    without a value (empty, only a header) as a whole."""
    points = []
    with path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.reader(handle), start=1):
            if not row or (number == 1 and not row[0][:1].isdigit()):
                continue
            if len(row) != 2:
                raise ValueError(f"line {number}: expected TIME,G_PER_KWH")
            try:
                at = datetime.fromisoformat(row[0].strip())
                value = float(row[1])
            except ValueError:
                raise ValueError(f"line {number}: expected an RFC 3339 time and a number, got {row!r}") from None
            if at.tzinfo is None:
                raise ValueError(f"line {number}: the time needs a UTC offset, e.g. 2026-11-20T12:00:00Z")
            points.append({"ts": at.isoformat(), "g_per_kwh": value})
    if not points:  # loading nothing is a mistake worth saying (an empty export, the wrong file)
        raise ValueError("no grid intensity values in it: expected lines TIME,G_PER_KWH")
    return points


def _money(amount: float, currency: str | None) -> str:
    return f"{amount:.2f}" + (f" {one_line(currency)}" if currency else "")


def _pct(value: float | None) -> str:
    return _num(value, 1)


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024  # type: ignore[assignment]
    return "-"
