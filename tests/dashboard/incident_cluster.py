"""A small cluster with one incident of each kind the overview must show once, written into a fresh
database as the exporters, the health loop and the straggler watch leave it, then alerted on by the real
engine with the shipped rules (one evaluation, as a collector started beside it would make):

- gpu-e01: an uncorrectable ECC error on GPU 2 three minutes ago (XIDs 48, 63 and 94, a row remap
  pending), the node drained for it;
- nb-1 (hiro): a notebook holding the 8 GPUs of gpu-i01, idle for two and a half hours;
- train-7 (alice): busy on gpu-t01, slowed by its GPU 1 (the detector's finding, and its alert);
- gpu-w01: a warning of its own, older than the others (NVLink errors).
"""

from __future__ import annotations

import asyncio
import datetime as dt

import psycopg

from gpuscope.alerts import views
from gpuscope.alerts.engine import AlertEngine
from gpuscope.alerts.rules import default_rules_text, parse_rules
from tests.alerts.telemetry import add_node, allocate, event, history

ECC_NODE = "gpu-e01"
IDLE_JOB, IDLE_NODE = "nb-1", "gpu-i01"
TRAINING_JOB, TRAINING_NODE = "train-7", "gpu-t01"
WARNING_NODE = "gpu-w01"


def load(dsn: str) -> None:
    views.apply(dsn)
    ecc = add_node(dsn, ECC_NODE, gpus=4, rack="r1")
    history(
        dsn,
        ecc,
        20,
        util_pct=60.0,
        ecc_uncorrected=lambda ago, gpu: 1.0 if gpu == ecc[2] and ago <= 3 else 0.0,
        remap_pending=lambda ago, gpu: 1.0 if gpu == ecc[2] and ago <= 3 else 0.0,
    )
    for code in (48, 63, 94):
        event(dsn, ecc[2], "xid", code=code)
    idle = add_node(dsn, IDLE_NODE, gpus=8, rack="r2")
    history(dsn, idle, 150)
    allocate(dsn, IDLE_JOB, idle, started_min_ago=150, user="hiro")
    training = add_node(dsn, TRAINING_NODE, gpus=2, rack="r3")
    history(dsn, training, 30, util_pct=95.0)
    allocate(dsn, TRAINING_JOB, training, started_min_ago=30, user="alice")
    warned = add_node(dsn, WARNING_NODE, gpus=1, rack="r3")
    history(dsn, warned, 9, util_pct=70.0, nvlink_crc_errors=lambda ago, gpu: float(10 - ago))
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO health_node (node_id, state, since, reason) SELECT node_id, 'drained',"
            " now() - interval '2 minutes', 'XID 48 on GPU 2' FROM node WHERE name = %s",
            (ECC_NODE,),
        )
        conn.execute(
            "INSERT INTO straggler (job_id, node_id, gpu_id, cause, slowdown, started_at, declared_at)"
            " VALUES (%s, (SELECT node_id FROM node WHERE name = %s), %s, 'thermal', 0.2,"
            " now() - interval '5 minutes', now() - interval '4 minutes')",
            (TRAINING_JOB, TRAINING_NODE, training[1]),
        )
    evaluate(dsn)


def evaluate(dsn: str) -> None:
    """One evaluation of every shipped rule; the NVLink warning backdated, so that it is the oldest."""

    async def run() -> None:
        engine = AlertEngine(parse_rules(default_rules_text()), None)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            results = await engine.cycle(conn, dt.datetime.now(dt.UTC))
            assert [r.error for r in results if r.error] == []
            await conn.execute(
                "UPDATE alert_instance SET active_at = now() - interval '40 minutes',"
                " fired_at = now() - interval '40 minutes' WHERE alertname = 'NvlinkErrorsIncreasing'"
            )

    asyncio.run(run())
