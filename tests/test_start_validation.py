"""`gpuscope collector` and `gpuscope dashboard` check every input before they touch anything: a DSN that
does not parse, a rules file that is missing or a rule the database refuses stop the start in one line,
before a token file is written, a port bound or "listening" logged. A database that does not answer is
another matter for the dashboard: it says so and serves, retrying."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.commands import GPUSCOPE

BAD_RULE = """
groups:
  - name: site
    rules:
      - alert: FineRule
        expr: SELECT cluster, node, gpu, uuid, temp_c AS value FROM gpu_latest WHERE temp_c > 200
      - alert: MisspeltView
        expr: SELECT cluster, node, 1.0 AS value FROM gpu_latst
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUSCOPE, *args], capture_output=True, text=True, timeout=90, check=False)


def refused_before_anything(done: subprocess.CompletedProcess[str], data_dir: Path) -> str:
    """The one error line a refused start printed (the test database's fsync=off may be warned about
    before), having written nothing and logged no "listening"."""
    assert done.returncode == 2, done.stderr
    assert "listening" not in done.stderr and "Traceback" not in done.stderr
    assert not (data_dir / "ingest-token").exists(), "no token generated for a start that is refused"
    errors = [line for line in done.stderr.splitlines() if "WARNING" not in line]
    assert len(errors) == 1, done.stderr
    return errors[0]


def test_a_dsn_that_does_not_parse_writes_no_token(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = run("collector", "--db", "notadsn", "--data-dir", str(data), "--listen", "127.0.0.1:0")
    line = refused_before_anything(done, data)
    assert line.startswith("gpuscope collector: error: --db is not a PostgreSQL connection string: missing")
    assert not data.exists()


def test_a_missing_rules_file_stops_the_start_before_listening(dsn: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    missing = tmp_path / "rules.yaml"
    done = run("collector", "--db", dsn, "--data-dir", str(data), "--listen", "127.0.0.1:0", "--rules", str(missing))
    line = refused_before_anything(done, data)
    assert line == f"gpuscope collector: error: {missing}: cannot read: No such file or directory"


def test_a_rule_the_database_refuses_stops_the_start_naming_it(dsn: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    rules = tmp_path / "rules.yaml"
    rules.write_text(BAD_RULE)
    done = run("collector", "--db", dsn, "--data-dir", str(data), "--listen", "127.0.0.1:0", "--rules", str(rules))
    line = refused_before_anything(done, data)
    assert line.startswith("gpuscope collector: error: alert rules that cannot run on this database:"), line
    assert "group 'site' rule MisspeltView: relation \"gpu_latst\" does not exist" in line
    assert "FineRule" not in line


def test_the_dashboard_refuses_a_dsn_that_does_not_parse_at_once() -> None:
    done = run("dashboard", "--db", "notadsn", "--listen", "127.0.0.1:0")
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("gpuscope dashboard: error: --db is not a PostgreSQL connection string: missing")


def test_the_dashboard_says_an_unreachable_database_and_serves() -> None:
    dashboard = subprocess.Popen(
        [*GPUSCOPE, "dashboard", "--db", "postgresql://u:hunter2@127.0.0.1:9/x", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert dashboard.stdout is not None
        serving = dashboard.stdout.readline()
        assert serving.startswith("gpuscope dashboard on http://127.0.0.1:"), serving
    finally:
        dashboard.send_signal(signal.SIGTERM)
        _, stderr = dashboard.communicate(timeout=30)
    [said] = [line for line in stderr.splitlines() if "gpuscope.dashboard_process" in line]
    assert "cannot reach the database (connection failed:" in said
    assert "Connection refused): serving anyway; the pages say so, and the dashboard keeps trying" in said
    assert "hunter2" not in stderr
