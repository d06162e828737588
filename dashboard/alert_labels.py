"""An alert's labels for people, and the matchers that silence exactly it.

Where it is (the node linked to its page, the GPU to its own, the UUID shortened with the whole of it on
hover, the NIC port), which job (linked to the job's page), then whatever else the rule labelled it with
("xid 79", "cause thermal"). alertname and severity have columns of their own."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dash import dcc, html

from gpuscope.dashboard.components import MUTED, node_href
from gpuscope.dashboard.uuids import uuid_span

OWN_COLUMNS = ("alertname", "severity")
WHERE = ("cluster", "rack", "node", "gpu", "uuid", "device", "port")
JOB = ("job_id", "user", "namespace", "pod", "container", "workload")
QUOTES = "\"'"


def where(labels: dict[str, str]) -> list[Any]:
    """Node, GPU, UUID and NIC port, as links where there is a page."""
    parts: list[Any] = []
    node, gpu = labels.get("node"), labels.get("gpu")
    if node:
        place = " · ".join(f"{k} {labels[k]}" for k in ("cluster", "rack") if labels.get(k))
        parts.append(dcc.Link(node, href=node_href(node), title=place or None, className="alert-node"))
    elif labels.get("rack"):
        parts.append(f"rack {labels['rack']}")
    if gpu:
        text = f"GPU {gpu}"
        parts.append(dcc.Link(text, href=node_href(node, gpu), className="alert-gpu") if node else text)
    if labels.get("uuid"):
        parts.append(uuid_span(labels["uuid"]))
    if labels.get("device"):
        parts.append(f"NIC {labels['device']}" + (f" port {labels['port']}" if labels.get("port") else ""))
    return _joined(parts)


def job(labels: dict[str, str]) -> list[Any]:
    """The job, linked to its page, and who runs it."""
    job_id = labels.get("job_id")
    if not job_id:
        return []
    owner = labels.get("user") or labels.get("namespace")
    link = dcc.Link(job_id, href=f"/jobs/{quote(job_id, safe='')}", className="alert-job")
    return [link, f" ({owner})"] if owner else [link]


def details(labels: dict[str, str]) -> list[Any]:
    """The labels not shown elsewhere, as "name value" chips."""
    shown = {*OWN_COLUMNS, *WHERE, *JOB}
    return [
        html.Span(
            [html.Span(name, style={"color": MUTED}), " ", value],
            className="alert-label",
            style={
                "background": "var(--mantine-color-default-hover)",
                "borderRadius": "3px",
                "padding": "0 0.4em",
                "marginRight": "0.3em",
                "whiteSpace": "nowrap",
            },
        )
        for name, value in sorted(labels.items())
        if name not in shown
    ]


def identifying(labels: dict[str, str]) -> dict[str, str]:
    """The labels that pin this alert down, for a silence of it: all but its severity (a rule may change
    it), and those another label already implies (the rack of a node, the UUID of a node's GPU, the user
    and pods of a job), so the silence reads short and still matches only this alert."""
    implied = {"severity"}
    if labels.get("node"):
        implied.add("rack")
        if labels.get("gpu"):
            implied.add("uuid")
    if labels.get("job_id"):
        implied.update(("user", "namespace", "pod", "container", "workload"))
    first = ("alertname", "cluster", "node", "gpu", "device", "port", "job_id")
    ordered = [k for k in first if k in labels] + sorted(k for k in labels if k not in first)
    return {k: labels[k] for k in ordered if k not in implied}


def matchers_text(labels: dict[str, str]) -> str:
    """The silence form's text for matching exactly these labels."""
    return ", ".join(f"{name}={_quoted(value)}" for name, value in labels.items())


def split_matchers(text: str) -> list[str]:
    """The form's "name=value, name!=value, ..." as one string per matcher. A value quoted right after its
    operator may hold commas: it ends at its closing quote followed by a comma or the end."""
    parts, current, quote = [], "", ""
    for i, char in enumerate(text or ""):
        if quote:
            current += char
            if char == quote and text[i + 1 :].lstrip()[:1] in ("", ","):
                quote = ""
        elif char in QUOTES and current.rstrip().endswith(("=", "~")):
            quote, current = char, current + char
        elif char == ",":
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part.strip() for part in parts if part.strip()]


def _quoted(value: str) -> str:
    """A value as split_matchers and the matcher parser read it back: quoted when bare it would change (a
    comma, spaces at its edges, a quote at its start; the parser drops one pair of outer quotes). A value
    with both kinds of quote and a comma after one cannot be written; none of ours has one."""
    if value and value == value.strip() and "," not in value and value[0] not in QUOTES:
        return value
    quote = "'" if '"' in value and "'" not in value else '"'
    return f"{quote}{value}{quote}"


def _joined(parts: list[Any]) -> list[Any]:
    out: list[Any] = []
    for part in parts:
        out += [" · ", part] if out else [part]
    return out
