"""The weekly summary of one account: GPU-hours allocated, doing work and held idle, energy, cost, carbon
and its top users, as data and as lines of text. Each chat service's module lays these out (its `digest`,
alerts/notify/<kind>.py, against the Protocol in alerts/notify/digest.py); names pass through its escaping
there, our own words and numbers do not need it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, timedelta

from gpuscope.alerts.notify.escape import Escape, plain
from gpuscope.collector.query.usage import Figures, UsageReport
from gpuscope.reports.text import hours, one_line, share

NO_ACCOUNT = "(no account)"


@dataclass(frozen=True)
class UserUsage:
    user: str | None
    gpu_hours_allocated: float
    gpu_hours_idle: float


@dataclass(frozen=True)
class AccountSummary:
    account: str | None  # None: jobs that carry no account (Kubernetes jobs)
    week_start: date
    figures: Figures | None  # None: no job of the account ran that week
    jobs: int
    currency: str | None
    top_users: tuple[UserUsage, ...]

    def headline(self, esc: Escape = plain) -> str:
        end = self.week_start + timedelta(days=6)
        return f"GPU usage of {esc(one_line(self.account, NO_ACCOUNT))}, {self.week_start} to {end} (UTC)"

    def facts(self) -> list[tuple[str, str]]:
        """(label, value) pairs, in our words and numbers only."""
        f = self.figures
        if f is None:
            return [("GPU-hours", "none this week")]
        cost = "no price configured" if f.cost is None else f"{f.cost:,.2f} {self.currency or ''}".rstrip()
        if f.cost is not None and f.unpriced_gpu_hours > 0:
            cost += f" (without {hours(f.unpriced_gpu_hours)} GPU-hours on unpriced models)"
        return [
            ("GPU-hours allocated", hours(f.gpu_hours_allocated)),
            ("GPU-hours active", hours(f.gpu_hours_active)),
            ("GPU-hours held idle", f"{hours(f.gpu_hours_idle)} ({share(f.gpu_hours_idle, f.gpu_hours_allocated)})"),
            ("Energy", f"{f.energy_kwh:,.1f} kWh"),
            ("CO2", f"{f.co2_kg:,.1f} kg"),
            ("Cost", cost),
            ("Jobs", str(self.jobs)),
        ]

    def user_lines(self, esc: Escape = plain) -> list[str]:
        return [
            f"{esc(one_line(u.user))}: {hours(u.gpu_hours_allocated)} GPU-hours,"
            f" {share(u.gpu_hours_idle, u.gpu_hours_allocated)} idle"
            for u in self.top_users
        ]

    def text(self, esc: Escape = plain) -> str:
        lines = [self.headline(esc), *(f"{label}: {value}" for label, value in self.facts())]
        if self.top_users:
            lines += ["Top users by GPU-hours allocated:", *(f"  {line}" for line in self.user_lines(esc))]
        return "\n".join(lines)


def account_summaries(
    by_account: UsageReport, by_job: UsageReport, week_start: date, top: int, accounts: tuple[str, ...] | None
) -> list[AccountSummary]:
    """One summary per account that ran jobs that week (`accounts` None), or per account listed (one that
    ran none gets a summary saying so); the most GPU-hours first."""
    users: dict[str | None, dict[str | None, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    for job in by_job.rows:
        totals = users[job.account][job.user]
        totals[0] += job.figures.gpu_hours_allocated
        totals[1] += job.figures.gpu_hours_idle
    rows = {row.key: row for row in by_account.rows}
    keys: list[str | None] = list(rows) if accounts is None else list(dict.fromkeys(accounts))
    out = []
    for key in keys:
        row = rows.get(key)
        ranked = sorted(users[key].items(), key=lambda item: (-item[1][0], item[0] or ""))[:top]
        top_users = tuple(UserUsage(user, allocated, idle) for user, (allocated, idle) in ranked)
        out.append(
            AccountSummary(key, week_start, row.figures if row else None, row.jobs if row else 0,
                           by_account.currency, top_users)
        )  # fmt: skip
    return out
