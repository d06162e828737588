"""The node page's reads over known rows: energy from counter steps (restarts, gaps, the range's edge),
ECC and row-remap counters and flags with since when, InfiniBand ports that flapped or went down,
NVLink rates, and the jobs a node ran."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql

from gpuscope.collector import query
from gpuscope.core.embedded_pg import EmbeddedPostgres
from tests.conftest import new_database

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
RANGE = query.TimeRange(T0, T0 + timedelta(minutes=10))
# Samples every 10 s, 5 s off the range's edges: the first step in the range straddles its start.
OFFSETS = range(-55, 600, 10)
POWER_W = (500.0, 400.0, 300.0, 200.0)
SILENT_AFTER = 300  # GPU 3 answers no more from here on
GAP = (200, 400)  # GPU 2 sends nothing in between
RESTART_AT = 300  # GPU 1's driver is reloaded: its counters start again from zero


def at(offset: float) -> datetime:
    return T0 + timedelta(seconds=offset)


def gpu_values(index: int, t: int) -> dict[str, Any] | None:
    """GPU `index` of node n1 at T0 + t: None when it sent nothing; up False with no values when silent."""
    if index == 2 and GAP[0] < t < GAP[1]:
        return None
    if index == 3 and t > SILENT_AFTER:
        return {"up": False}
    since_start = t + 60
    energy = 1e6 + POWER_W[index] * since_start
    corrected, uncorrected, pending = 10, 0, 0
    if index == 0 and t >= 100:
        corrected = 13
    if index == 0 and t >= 250:
        uncorrected, pending = 1, 1
    if index == 1:
        pending = 1  # since before the range
        if t > RESTART_AT:
            energy = POWER_W[1] * (t - RESTART_AT)
            corrected = 0 if t < 400 else 2
    nvlink = None if index == 3 else 1e12 + 1e9 * since_start
    return {
        "up": True,
        "energy_j": energy,
        "ecc_corrected": corrected,
        "ecc_uncorrected": uncorrected,
        "remapped_rows_correctable": 1,
        "remapped_rows_uncorrectable": uncorrected,
        "remap_pending": pending,
        "remap_failure": 0,
        "nvlink_tx_bytes": nvlink,
        "nvlink_rx_bytes": None if nvlink is None else nvlink / 2,
        "nvlink_crc_errors": None if nvlink is None else 5 + (t >= 400),
        "nvlink_replay_errors": None if nvlink is None else 5,
        "nvlink_recovery_errors": None if nvlink is None else 0,
    }


def port_values(port: int, t: int) -> dict[str, Any]:
    """mlx5_0: healthy. mlx5_1: down twice (t 105-125 and 405-415), Active again at half rate. mlx5_2: down
    and disabled from t 505."""
    state, phys, rate, downed, symbols = 4, 5, 400.0, 0, 0
    if port == 1:
        down = 105 <= t <= 125 or 405 <= t <= 415
        state, phys = (1, 2) if down else (4, 5)
        downed = (t >= 105) + (t >= 405)
        symbols = 37 * downed
        rate = 200.0 if t > 415 else 400.0
    if port == 2 and t >= 505:
        state, phys, downed = 1, 3, 1
    return {"state": state, "phys_state": phys, "rate_gbps": rate, "link_downed": downed, "symbol_errors": symbols,
            "rcv_errors": 0, "link_error_recovery": downed, "xmit_discards": 0}  # fmt: skip


@pytest.fixture(scope="module")
def conn(postgres: EmbeddedPostgres) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(new_database(postgres), autocommit=True) as connection:
        for table in ("gpu_sample", "ib_port_sample"):
            connection.execute(
                sql.SQL(
                    "CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ('2026-11-01 00:00+00') TO ('2026-11-02 00:00+00')"
                ).format(sql.Identifier(f"{table}_p20261101"), sql.Identifier(table))
            )
        n1, n2 = (_node(connection, name) for name in ("n1", "n2"))
        gpus = [_gpu(connection, n1, i) for i in range(4)]
        ports = [_port(connection, n1, f"mlx5_{i}") for i in range(3)]
        for t in OFFSETS:
            for index, gpu_id in enumerate(gpus):
                _insert(connection, "gpu_sample", "gpu_id", gpu_id, at(t), gpu_values(index, t))
            for index, port_id in enumerate(ports):
                _insert(connection, "ib_port_sample", "port_id", port_id, at(t), port_values(index, t))
        # Another node: its errors and its job are not n1's.
        decoy = _gpu(connection, n2, 0)
        for t in OFFSETS:
            _insert(connection, "gpu_sample", "gpu_id", decoy, at(t), {"up": True, "ecc_uncorrected": t})
        _insert(connection, "ib_port_sample", "port_id", _port(connection, n2, "mlx5_0"), at(5), {"state": 1})
        _allocate(connection, "train-7", "ada", n1, gpus[:2], at(-3600), None)
        _allocate(connection, "eval-3", "bob", n1, gpus[2:], at(60), at(300))
        _allocate(connection, "long-gone", "cy", n1, gpus, at(-7200), at(-100))
        _allocate(connection, "elsewhere", "dee", n2, [decoy], at(0), None)
        yield connection


def test_energy_counts_every_step_and_the_part_of_the_first_inside_the_range(conn: psycopg.Connection) -> None:
    used = query.energy(conn, RANGE)[_gpu_id(conn, 0)]
    # Samples at 5, 15, ... 595 s: 59 whole steps, and half of the step from -5 to 5 s.
    assert used.seconds == pytest.approx(595)
    assert used.joules == pytest.approx(500 * 595)
    assert used.kwh == pytest.approx(500 * 595 / 3.6e6)
    assert used.mean_power_w == pytest.approx(500) and used.restarts == 0


def test_a_drop_of_the_energy_counter_is_a_restart_counted_from_zero(conn: psycopg.Connection) -> None:
    used = query.energy(conn, RANGE)[_gpu_id(conn, 1)]
    # The step across the reload at 300 s counts what the counter holds after it (400 W x 5 s), not a
    # negative step and not the counter's earlier total; the 5 s before the reload are not known.
    assert used.restarts == 1
    assert used.joules == pytest.approx(400 * 595 - 400 * 5)


def test_a_gap_is_spanned_by_the_counter_and_a_silent_gpu_keeps_its_mean_power(conn: psycopg.Connection) -> None:
    found = query.energy(conn, RANGE)
    gap = found[_gpu_id(conn, 2)]
    assert gap.joules == pytest.approx(300 * 595), "the board counted through the 200 s without samples"
    silent = found[_gpu_id(conn, 3)]
    assert silent.seconds == pytest.approx(295), "up to its last answer, at 295 s"
    assert silent.mean_power_w == pytest.approx(200), "not averaged over the minutes it said nothing"
    assert query.energy_kwh(conn, RANGE, [_gpu_id(conn, 0)]) == {_gpu_id(conn, 0): pytest.approx(500 * 595 / 3.6e6)}
    assert set(query.energy_kwh(conn, RANGE)) == {_gpu_id(conn, i) for i in range(4)}, "the decoy reports no energy"


def test_ecc_and_row_remapping_with_since_when(conn: psycopg.Connection) -> None:
    gpus = query.node_gpus(conn, "n1")
    assert [g.gpu_index for g in gpus] == [0, 1, 2, 3]
    health = {h.gpu.gpu_index: h for h in query.gpu_health(conn, gpus, RANGE)}
    corrected = health[0].counter("ecc_corrected")
    assert (corrected.increase, corrected.latest, corrected.first_rise) == (3, 13, at(105))
    uncorrected = health[0].counter("ecc_uncorrected")
    assert (uncorrected.increase, uncorrected.latest, uncorrected.last_rise) == (1, 1, at(255))
    assert health[0].counter("remapped_rows_uncorrectable").increase == 1
    assert health[0].counter("remapped_rows_correctable").increase == 0
    pending = health[0].state("remap_pending")
    assert (pending.latest, pending.changed_at, pending.departures) == (1, at(255), 1)
    held = health[1].state("remap_pending")
    assert (held.latest, held.changed_at) == (1, None), "pending all along: since before the range"
    restarted = health[1].counter("ecc_corrected")
    assert (restarted.increase, restarted.latest) == (2, 2), "a drop to 0 is a restart, not 10 errors fewer"
    assert health[3].state("remap_pending").latest == 0, "its last answer, not the silence after"
    assert health[3].last_seen == at(295) and health[0].state("remap_failure").latest == 0


def test_a_counter_first_seen_inside_the_range_counts_from_its_first_sample(conn: psycopg.Connection) -> None:
    from_first = query.TimeRange(at(-60), at(600))  # nothing before: the first sample has nothing to follow
    (gpu0, *_) = query.gpu_health(conn, query.node_gpus(conn, "n1"), from_first)
    remapped = gpu0.counter("remapped_rows_correctable")
    assert (remapped.increase, remapped.latest, remapped.last_rise) == (0, 1, None), "1 all along: none in range"
    assert gpu0.counter("ecc_corrected").increase == 3


def test_nvlink_errors_and_rates_and_a_gpu_without_nvlink(conn: psycopg.Connection) -> None:
    gpus = query.node_gpus(conn, "n1")
    health = query.gpu_health(conn, gpus, RANGE)
    assert [h.has_nvlink for h in health] == [True, True, True, False]
    crc = health[0].counter("nvlink_crc_errors")
    assert (crc.increase, crc.latest, crc.last_rise) == (1, 6, at(405))
    series = query.nvlink_throughput(conn, RANGE, 60, [g.gpu_id for g in gpus])
    assert len(series.times) == 10
    np.testing.assert_allclose(series.tx[0], 1e9)
    np.testing.assert_allclose(series.rx[0], 0.5e9)
    assert [series.reported(g.gpu_id) for g in gpus] == [True, True, True, False]
    assert np.isnan(series.tx[2, 4]), "no samples in GPU 2's gap: no rate there, not zero"


def test_ib_ports_that_flapped_or_went_down_and_since_when(conn: psycopg.Connection) -> None:
    ports = {p.port.device: p for p in query.port_health(conn, "n1", RANGE)}
    assert list(ports) == ["mlx5_0", "mlx5_1", "mlx5_2"]
    healthy = ports["mlx5_0"]
    assert healthy.state("state").latest == 4 and healthy.state("state").departures == 0
    assert healthy.counter("link_downed").increase == 0 and healthy.counter("symbol_errors").last_rise is None
    flapping = ports["mlx5_1"]
    state = flapping.state("state")
    assert (state.latest, state.departures, state.last_departure) == (4, 2, at(405))
    assert state.changed_at == at(425), "Active again since"
    assert flapping.counter("link_downed").increase == 2 and flapping.counter("symbol_errors").increase == 74
    assert flapping.state("phys_state").departures == 2
    rate = flapping.state("rate_gbps")
    assert (rate.latest, rate.changed_at) == (200, at(425))
    down = ports["mlx5_2"]
    assert (down.state("state").latest, down.state("state").changed_at) == (1, at(505))
    assert down.state("phys_state").latest == 3


def test_the_jobs_a_node_ran_running_first(conn: psycopg.Connection) -> None:
    jobs = query.node_jobs(conn, "n1", RANGE)
    assert [j.job_id for j in jobs] == ["train-7", "eval-3"], "neither the one over before nor another node's"
    running, ended = jobs
    assert (running.running, running.user, running.started_at, running.gpus_now) == (True, "ada", at(-3600), [0, 1])
    assert (ended.running, ended.ended_at, ended.gpus_now, ended.gpus) == (False, at(300), [], [2, 3])


def test_a_node_without_samples_has_rows_that_say_so(conn: psycopg.Connection) -> None:
    later = query.TimeRange(T0 + timedelta(hours=3), T0 + timedelta(hours=4))
    health = query.gpu_health(conn, query.node_gpus(conn, "n1"), later)
    assert len(health) == 4 and all(h.last_seen is None and h.counter("ecc_corrected").latest is None for h in health)
    assert query.energy(conn, later) == {} and query.node_gpus(conn, "nowhere") == []
    assert all(p.summary is None for p in query.port_health(conn, "n1", later))


def _gpu_id(conn: psycopg.Connection, index: int) -> int:
    return next(g.gpu_id for g in query.node_gpus(conn, "n1") if g.gpu_index == index)


def _node(conn: psycopg.Connection, name: str) -> int:
    return _returning(conn, "INSERT INTO node (cluster, name, rack) VALUES ('c', %s, 'r') RETURNING node_id", name)


def _gpu(conn: psycopg.Connection, node_id: int, index: int) -> int:
    return _returning(
        conn,
        "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (%s, %s, %s, 'H100', '-')"
        " RETURNING gpu_id",
        node_id,
        index,
        f"GPU-{node_id}-{index}",
    )


def _port(conn: psycopg.Connection, node_id: int, device: str) -> int:
    return _returning(
        conn, "INSERT INTO ib_port (node_id, device, port) VALUES (%s, %s, 1) RETURNING port_id", node_id, device
    )


def _returning(conn: psycopg.Connection, statement: str, *params: Any) -> int:
    row = conn.execute(statement, params).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return int(row[0])


def _insert(
    conn: psycopg.Connection, table: str, key: str, device: int, ts: datetime, values: dict[str, Any] | None
) -> None:
    if values is None:
        return
    columns = [key, "ts", *values]
    conn.execute(
        sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, columns)),
            sql.SQL(", ").join(sql.Placeholder() * len(columns)),
        ),
        [device, ts, *values.values()],
    )


def _allocate(
    conn: psycopg.Connection,
    job: str,
    user: str,
    node_id: int,
    gpu_ids: list[int],
    start: datetime,
    end: datetime | None,
) -> None:
    for gpu_id in gpu_ids:
        conn.execute(
            "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen, ended_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (job, user, node_id, gpu_id, start, end or at(600), end),
        )


def test_each_bucket_names_the_job_that_held_the_gpu(conn: psycopg.Connection) -> None:
    """What a chart's hover says beside a value: the job that held that GPU in that bucket."""
    minutes = [at(60 * m) for m in range(10)]
    n1, n2 = (query.node_gpus(conn, name) for name in ("n1", "n2"))
    held = query.held_by(conn, [n1[0].gpu_id, n1[2].gpu_id, n2[0].gpu_id, -1], minutes, 60)
    assert list(held[0]) == ["job train-7 (ada)"] * 10
    # eval-3 held it from minute 1 to minute 5: a bucket it neither entered before its end nor left after
    # its start is not its own.
    assert list(held[1]) == [""] + ["job eval-3 (bob)"] * 4 + [""] * 5
    assert list(held[2]) == ["job elsewhere (dee)"] * 10
    assert list(held[3]) == [""] * 10
    # One wide bucket across a change of hands names both, oldest first.
    [[both]] = query.held_by(conn, [n1[0].gpu_id], [at(-200)], 600)
    assert both == "job long-gone (cy), job train-7 (ada)"
