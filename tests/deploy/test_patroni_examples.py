"""The Patroni examples, as files: the bare-metal patroni.yml passes Patroni's own validator and asks for
synchronous replication through etcd's v3 API; Patroni is kept supervised; the collector's DSN lists every
node, wants the primary and takes its password from the file its unit loads; the Kubernetes overlay
points the collectors at the primary Service and the Secret that Zalando's postgres-operator creates for
the CR's role. That the template boots: test_patroni_example_boots.py."""

from __future__ import annotations

import configparser
import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict

from gpuscope.core.listen import free_loopback_port
from tests.conftest import require_tool
from tests.deploy.patroni_examples import (
    BARE_METAL,
    DEPLOY,
    KUBERNETES,
    pg_bin,
    shipped_dsn,
    shipped_pgpass,
    template,
)

# Where systemd puts a unit's credentials (LoadCredential=NAME:PATH): the DSN's passfile must be there.
CREDENTIALS = Path("/run/credentials/gpuscope-collector.service")
# The names the operator gives what it creates for a cluster (its docs/user.md and pkg/cluster/k8sres.go).
OPERATOR_SECRET = "{user}.{cluster}.credentials.postgresql.acid.zalan.do"


# -- bare metal: the configuration --------------------------------------------------------------------


def for_this_machine(config: dict[str, Any], root: Path) -> dict[str, Any]:
    """The template with what Patroni's validator checks on the machine it runs on made true here: the
    listen ports free, bin_dir holding PostgreSQL's programs, data_dir absent. Nothing else changes."""
    config = copy.deepcopy(config)
    config["restapi"]["listen"] = f"0.0.0.0:{free_loopback_port()}"
    config["postgresql"]["listen"] = f"0.0.0.0:{free_loopback_port()}"
    config["postgresql"]["data_dir"] = str(root / "data")
    if not Path(config["postgresql"]["bin_dir"]).is_dir():
        config["postgresql"]["bin_dir"] = str(pg_bin())
    return config


def validate(config: dict[str, Any], root: Path) -> subprocess.CompletedProcess[str]:
    path = root / "patroni.yml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return subprocess.run(
        [require_tool("patroni"), "--validate-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},  # no PATRONI_* from the test run's environment
    )


def test_patronis_validator_accepts_the_template(tmp_path: Path) -> None:
    result = validate(for_this_machine(template(), tmp_path), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_patronis_validator_would_notice_a_broken_template(tmp_path: Path) -> None:
    config = for_this_machine(template(), tmp_path)
    config["bootstrap"]["dcs"]["ttl"] = "thirty"
    del config["postgresql"]["authentication"]["replication"]
    result = validate(config, tmp_path)
    assert result.returncode != 0
    assert "ttl" in result.stderr and "replication" in result.stderr, result.stderr


def test_the_template_replicates_synchronously_through_etcd_v3() -> None:
    config = template()
    dcs = config["bootstrap"]["dcs"]
    assert "etcd3" in config and "etcd" not in config, "Debian's etcd 3.4: the v3 API"
    assert len(config["etcd3"]["hosts"]) == 3
    assert dcs["synchronous_mode"] is True
    # a commit returns once the sync standby has it: only then is an acknowledged batch on two nodes
    assert dcs["postgresql"]["parameters"]["synchronous_commit"] in {"on", "remote_apply"}
    assert dcs["postgresql"]["use_pg_rewind"] is True and dcs["postgresql"]["parameters"]["wal_log_hints"] == "on"
    assert config["restapi"]["authentication"]["password"], "an open REST API lets anyone switch over"
    # Patroni 3 writes postgresql.pg_hba; Patroni 3.0.2's validator wants bootstrap.pg_hba: the same list
    hba = config["postgresql"]["pg_hba"]
    assert hba == config["bootstrap"]["pg_hba"]
    rules = [line.split()[:3] for line in hba]
    assert ["host", "replication", config["postgresql"]["authentication"]["replication"]["username"]] in rules
    assert ["host", "gpuscope", "gpuscope"] in rules and ["host", "gpuscope", "gpuscope_ro"] in rules


def test_post_bootstrap_creates_the_database_and_roles() -> None:
    script = Path(template()["bootstrap"]["post_bootstrap"])
    shipped = BARE_METAL / script.name
    text = shipped.read_text()
    assert "CREATE DATABASE gpuscope OWNER gpuscope;" in text
    assert "CREATE ROLE gpuscope LOGIN;" in text and "IN ROLE pg_read_all_data" in text
    assert "PASSWORD '" not in text.upper(), "no password in the script (nor in the server's log)"
    assert os.access(shipped, os.X_OK)
    result = subprocess.run([require_tool("shellcheck"), str(shipped)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_patroni_is_restarted_whenever_it_stops() -> None:
    """Patroni issue #2841: a primary left without its Patroni must get it back (docs/operations.md)."""
    dropin = configparser.ConfigParser(strict=False, interpolation=None)
    dropin.read_string((BARE_METAL / "patroni.service.d" / "supervise.conf").read_text())
    assert dropin["Service"]["Restart"] == "always"
    assert dropin["Unit"]["StartLimitIntervalSec"] == "0", "systemd must never give up restarting it"


def units_with_drop_ins(directory: Path, supervise: str) -> list[str]:
    """Debian's patroni.service and the collector's unit, each with its drop-in beside it as systemd
    would find it (`supervise` as supervise.conf's text); the collector's ExecStart made this checkout's."""
    debian_unit = Path("/lib/systemd/system/patroni.service")
    if not debian_unit.exists():
        require_tool("patroni")  # CI installs Debian's package, which ships the unit
        pytest.skip("Debian's patroni.service is not installed (Patroni from elsewhere)")
    collector = (DEPLOY / "systemd" / "gpuscope-collector.service").read_text()
    gpuscope = Path(sys.executable).parent / "gpuscope"  # verify checks that ExecStart's program exists
    (directory / "gpuscope-collector.service").write_text(collector.replace("/usr/local/bin/gpuscope", str(gpuscope)))
    shutil.copy(debian_unit, directory / "patroni.service")
    for name in ("patroni.service.d", "gpuscope-collector.service.d"):
        shutil.copytree(BARE_METAL / name, directory / name)
    (directory / "patroni.service.d" / "supervise.conf").write_text(supervise)
    return [str(directory / "patroni.service"), str(directory / "gpuscope-collector.service")]


def systemd_verify(units: list[str]) -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not installed (tests/deploy/test_systemd.py skips too)")
    result = subprocess.run([tool, "verify", *units], capture_output=True, text=True, timeout=60, check=False)
    return f"rc={result.returncode} {result.stdout}{result.stderr}".strip()


def test_systemd_accepts_the_drop_ins_on_their_units(tmp_path: Path) -> None:
    supervise = (BARE_METAL / "patroni.service.d" / "supervise.conf").read_text()
    assert systemd_verify(units_with_drop_ins(tmp_path, supervise)) == "rc=0"
    broken = tmp_path / "broken"
    broken.mkdir()
    noticed = systemd_verify(units_with_drop_ins(broken, supervise.replace("=always", "=sometimes")))
    assert "supervise.conf" in noticed, "verify reads the drop-in (so the check above can fail)"


# -- bare metal: the collector's address --------------------------------------------------------------


def test_the_collectors_dsn_lists_every_node_and_wants_the_primary() -> None:
    dsn = shipped_dsn()
    assert len(dsn["host"].split(",")) == 3
    assert dsn["target_session_attrs"] == "read-write"
    assert "password" not in dsn, "the password belongs in the password file"
    assert int(dsn["connect_timeout"]) > 0, "a node whose packets are dropped must not hold up the failover"


def test_the_password_file_is_the_credential_the_collector_unit_loads() -> None:
    dropin = configparser.ConfigParser(strict=False, interpolation=None)
    dropin.read_string((BARE_METAL / "gpuscope-collector.service.d" / "patroni.conf").read_text())
    name, source = dropin["Service"]["LoadCredential"].split(":", 1)
    assert (DEPLOY / "systemd" / "gpuscope-collector.service").exists(), "the unit this drop-in extends"
    assert shipped_dsn()["passfile"] == str(CREDENTIALS / name)
    assert source == "/etc/gpuscope/pgpass"
    host, port, database, user, password = shipped_pgpass()
    dsn = shipped_dsn()
    assert host == "*" and port in dsn["port"].split(","), "one line for every node"
    assert (database, user) == (dsn["dbname"], dsn["user"]) and password


# -- Kubernetes: Zalando's postgres-operator ----------------------------------------------------------


def kustomization() -> dict[str, Any]:
    return dict(yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text()))


def the_cr() -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((KUBERNETES / "postgresql.yaml").read_text()) if d]
    return dict(doc)


def apply_json_patch(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902's add, replace and test, as kustomize applies them (enough for the overlay's patch)."""
    document = copy.deepcopy(document)
    for op in operations:
        *parents, last = op["path"].lstrip("/").split("/")
        target: Any = document
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        index: Any = last if isinstance(target, dict) else (len(target) if last == "-" else int(last))
        if op["op"] == "test":
            assert target[index] == op["value"], f"test failed at {op['path']}: {target[index]!r}"
        elif op["op"] == "replace":
            target[index] = op["value"]
        elif op["op"] == "add" and isinstance(target, list):
            target.insert(index, op["value"])
        elif op["op"] == "add":
            target[index] = op["value"]
        else:
            raise ValueError(f"operation {op['op']} is not one this test applies")
    return document


def patched_collector() -> dict[str, Any]:
    (patch,) = kustomization()["patches"]
    assert patch["target"] == {"group": "apps", "version": "v1", "kind": "Deployment", "name": "gpuscope-collector"}
    base = [d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "base" / "collector.yaml").read_text()) if d]
    (deployment,) = [d for d in base if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpuscope-collector"]
    return apply_json_patch(deployment, yaml.safe_load(patch["patch"]))


def test_the_kustomization_lists_files_that_exist() -> None:
    for resource in kustomization()["resources"]:
        path = KUBERNETES / resource
        assert path.is_file() or (path / "kustomization.yaml").is_file(), resource


def test_the_cr_runs_three_instances_with_a_synchronous_standby() -> None:
    cr = the_cr()
    spec = cr["spec"]
    assert (cr["apiVersion"], cr["kind"]) == ("acid.zalan.do/v1", "postgresql")
    assert cr["metadata"]["name"].startswith(spec["teamId"] + "-"), "the operator requires it"
    assert spec["numberOfInstances"] == 3
    assert spec["patroni"]["synchronous_mode"] is True
    assert spec["postgresql"]["parameters"]["synchronous_commit"] in {"on", "remote_apply"}
    assert spec["databases"]["gpuscope"] in spec["users"], "the database's owner is a role the CR creates"
    base = yaml.safe_load((DEPLOY / "kubernetes" / "base" / "kustomization.yaml").read_text())
    assert cr["metadata"]["namespace"] == base["namespace"], "the operator's Secret must be in the collectors'"


def test_the_collectors_reach_the_operators_primary_service_with_its_secret() -> None:
    cr = the_cr()
    container = patched_collector()["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    dsn = conninfo_to_dict(env["GPUSCOPE_COLLECTOR_DB"]["value"])
    assert dsn["host"] == cr["metadata"]["name"], "the operator's Service for the primary (-repl: standbys)"
    assert dsn["target_session_attrs"] == "read-write" and "password" not in dsn
    assert cr["spec"]["databases"][dsn["dbname"]] == dsn["user"]
    secret = env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]
    assert secret == {
        "name": OPERATOR_SECRET.format(user=dsn["user"], cluster=cr["metadata"]["name"]),
        "key": "password",
    }
    assert env["GPUSCOPE_COLLECTOR_TIMESCALEDB"]["value"] == "off"


def test_the_patch_fails_rather_than_replace_another_variable() -> None:
    (patch,) = kustomization()["patches"]
    base = {"spec": {"template": {"spec": {"containers": [{"env": [{"name": "SOMETHING_ELSE", "value": "x"}]}]}}}}
    with pytest.raises(AssertionError, match="test failed"):
        apply_json_patch(base, yaml.safe_load(patch["patch"]))


def test_kubectl_kustomize_renders_the_overlay() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (the checks above apply the patch themselves)")
    result = subprocess.run(
        [kubectl, "kustomize", str(KUBERNETES)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    rendered = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(result.stdout) if d}
    cr = rendered["postgresql", the_cr()["metadata"]["name"]]
    deployment = rendered["Deployment", "gpuscope-collector"]
    # the operator's Secret is in the CR's namespace; a secretKeyRef reads the pod's own namespace only
    assert cr["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    rendered_pod, patched_pod = deployment["spec"]["template"]["spec"], patched_collector()["spec"]["template"]["spec"]
    assert rendered_pod["containers"][0]["env"] == patched_pod["containers"][0]["env"]
    assert rendered_pod["volumes"] == patched_pod["volumes"]
