"""The email to a user whose jobs held GPUs idle last week: each job with its idle GPUs and GPU-hours,
and how to stop these emails.

Only our own words go into headers: the subject names the week, never the user, and the recipient is an
address settings.py checked (a user name with a line break, a quote or a second @ gets no address). The
names in the body (user, jobs, partitions) are made one line (text.one_line): a plain-text body has no
markup to inject, but a name must not forge lines of the message either."""

from __future__ import annotations

import email.utils
from datetime import date, datetime, timedelta
from email.message import EmailMessage

from gpuscope.reports.digest.settings import EmailSettings
from gpuscope.reports.digest.waste import JobWaste, UserWaste
from gpuscope.reports.text import hours, one_line, share

DEFAULT_OPT_OUT = (
    "To stop these emails, ask the cluster's administrators to opt you out of gpuscope's usage emails"
    " (they run: PUT /api/v1/reports/opt-out/USER on the collector)."
)


def waste_email(
    waste: UserWaste, address: str, week_start: date, settings: EmailSettings, now: datetime
) -> EmailMessage:
    message = EmailMessage()
    message["Subject"] = f"GPUs your jobs held idle, week of {week_start}"
    message["From"] = settings.sender
    message["To"] = address
    message["Date"] = email.utils.format_datetime(now)
    message["Message-ID"] = email.utils.make_msgid("gpuscope-digest", settings.sender.rpartition("@")[2])
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation auto-replies to this
    message.set_content(waste_text(waste, week_start, settings))
    return message


def waste_text(waste: UserWaste, week_start: date, settings: EmailSettings) -> str:
    end = week_start + timedelta(days=6)
    idle, allocated = waste.gpu_hours_idle, waste.gpu_hours_allocated
    lines = [
        f"Hello {one_line(waste.user)},",
        "",
        f"from {week_start} to {end} (UTC) your jobs held GPUs that did no work: {hours(idle)} of"
        f" {hours(allocated)} GPU-hours allocated ({share(idle, allocated)})"
        " were idle, in stretches of half an hour or more. Those GPUs were kept from others waiting for them.",
        "",
        "Jobs with idle GPUs:",
        *(f"  {job_line(job)}" for job in waste.jobs),
    ]
    if waste.more_jobs:
        lines.append(f"  and {waste.more_jobs} more job(s)")
    lines += [
        "",
        "Ask for the GPUs a job uses, and end a job when its work is done (an interactive session left open holds"
        " its GPUs). `gpuscope jobstats JOBID` shows a job's use per GPU.",
        "",
        "--",
        settings.opt_out_instructions or DEFAULT_OPT_OUT,
    ]
    return "\n".join(lines) + "\n"


def job_line(job: JobWaste) -> str:
    """E.g. 'job 4711 (partition gpu): 4 of 8 GPUs idle for 3.0 h, 12.0 of 24.0 GPU-hours this week'."""
    where = f" (partition {one_line(job.partition)})" if job.partition else ""
    week = f"{hours(job.gpu_hours_idle)} of {hours(job.gpu_hours_allocated)} GPU-hours idle this week"
    if job.gpus is None or not job.idle_gpus or job.idle_hours is None:
        return f"job {one_line(job.job)}{where}: {week}"
    low, high = job.idle_hours
    span = f"{hours(high)} h" if high - low < 0.1 else f"{hours(low)} to {hours(high)} h"
    return f"job {one_line(job.job)}{where}: {job.idle_gpus} of {job.gpus} GPUs idle for {span}; {week}"
