"""An exporter killed while its collector is away, then started again on the same spool: what was on
disk when it died is stored exactly once, and what it lost is only the moment before the kill (the
samples since its last spool tick, README "What an outage costs")."""

from __future__ import annotations

import itertools
import signal
import subprocess
import time
from pathlib import Path

import psycopg

from gpuscope.collector.ingest.wire import decode
from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.core.listen import free_loopback_port
from tests.commands import GPUSCOPE, token_file
from tests.exporter.helpers import stored_rows
from tests.faults.harness import TOKEN, Collector
from tests.waiting import eventually

NODE = "spooling-node"
INTERVAL_S = 0.2
# The README's bound: what was sampled since the last back-off tick (0.5 s), plus the sample being taken,
# plus slack for a loaded machine (the tick's fsync, scheduling).
LOSS_BOUND_S = 0.5 + 2 * INTERVAL_S + 0.6


def start_exporter(collector: Collector, spool: Path, tokens: Path) -> subprocess.Popen[bytes]:
    command = [*GPUSCOPE, "exporter", "--backend", "sim", "--sim-gpus", "2", "--jobs", "none", "--node", NODE]
    command += ["--cluster", "faults", "--interval", str(INTERVAL_S), "--push-interval", "1"]
    command += ["--listen", f"127.0.0.1:{free_loopback_port()}", "--push", collector.url]
    command += ["--token-file", str(tokens), "--spool-dir", str(spool)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def sample_times(dsn: str) -> list[float]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT DISTINCT extract(epoch FROM s.ts)::float8 FROM gpu_sample s JOIN gpu USING (gpu_id)"
            " JOIN node n USING (node_id) WHERE n.name = %s ORDER BY 1",
            (NODE,),
        ).fetchall()
    return [row[0] for row in rows]


def spooled_rows(spool: Path) -> set[tuple[int, float]]:
    """(GPU, timestamp) of every sample in the spool's batch files, as the collector would read them."""
    rows = set()
    for path in sorted(spool.glob("*.batch")):
        batch = decode(path.read_bytes(), time.time() + 60, content_type=BINARY_CONTENT_TYPE)
        samples = batch.gpu_samples
        rows |= {(int(d), round(float(t), 3)) for d, t in zip(samples.device, samples.ts, strict=True)}
    return rows


def test_exporter_killed_during_an_outage_loses_only_the_last_moment(collector: Collector, data_dir: Path) -> None:
    spool = data_dir / "spool"
    tokens = token_file(data_dir / "token", TOKEN)
    exporter = start_exporter(collector, spool, tokens)
    try:
        eventually(lambda: len(sample_times(collector.dsn())) >= 10, what="the exporter's first batches", timeout=30)
        dsn = collector.dsn()
        collector.signal(signal.SIGKILL)  # the outage: connections refused from now on
        assert collector.process is not None
        collector.process.wait(10)
        outage = time.time()
        time.sleep(3.0)  # the scenario is time passing: an outage of a few seconds, spooled meanwhile
        exporter.send_signal(signal.SIGKILL)
        exporter.wait(10)
        killed = time.time()
        on_disk = spooled_rows(spool)
        assert on_disk, "the outage's samples were on disk when the exporter died"
        assert min(ts for _, ts in on_disk) <= outage + LOSS_BOUND_S, "spooled from the start of the outage"

        collector.restart(timeout=60)
        exporter = start_exporter(collector, spool, tokens)  # a new process: replays the old spool first
        eventually(lambda: not list(spool.glob("*.batch")), what="the spool replayed and emptied", timeout=30)
        times = sample_times(dsn)
        before_kill = [t for t in times if t <= killed]
        assert killed - max(before_kill) <= LOSS_BOUND_S, f"lost the last {killed - max(before_kill):.2f} s"
        gaps = [b - a for a, b in itertools.pairwise(before_kill)]
        assert max(gaps) <= 2.5 * INTERVAL_S, f"a gap of {max(gaps):.2f} s before the kill: samples were lost"
        with psycopg.connect(dsn) as conn:
            in_database = {
                (int(g), round(float(t), 3))
                for g, t in conn.execute(
                    "SELECT gpu_index, extract(epoch FROM s.ts) FROM gpu_sample s JOIN gpu USING (gpu_id)"
                    " JOIN node n USING (node_id) WHERE n.name = %s",
                    (NODE,),
                ).fetchall()
            }
        assert on_disk <= in_database, f"{len(on_disk - in_database)} spooled samples never stored"
        total, distinct = stored_rows(dsn)
        assert total == distinct, "no sample stored twice"
        print(f"exporter SIGKILL in an outage: {len(on_disk)} spooled rows all stored; lost the last "
              f"{killed - max(before_kill):.2f} s before the kill")  # fmt: skip
    finally:
        exporter.kill()
        exporter.wait(10)
