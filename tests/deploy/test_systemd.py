"""The systemd units: `systemd-analyze verify` accepts them (where systemd-analyze exists), and they keep
the hardening the operations guide promises."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SYSTEMD = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
UNITS = sorted(SYSTEMD.glob("*.service"))
GPUSCOPE = str(Path(sys.executable).parent / "gpuscope")  # where `make test` installed it


def verify(directory: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not installed (the unit checks below still run)")
    return subprocess.run(
        [tool, "verify", *sorted(str(p) for p in directory.glob("*.service"))],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def copies(tmp_path: Path, edit: str = "") -> Path:
    """The units with ExecStart pointing at this checkout's gpuscope (verify checks the binary exists)."""
    for unit in UNITS:
        text = unit.read_text().replace("/usr/local/bin/gpuscope", GPUSCOPE)
        (tmp_path / unit.name).write_text(text.replace("Type=simple", edit) if edit else text)
    return tmp_path


def test_systemd_analyze_verifies_the_units(tmp_path: Path) -> None:
    result = verify(copies(tmp_path))
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


def test_verify_would_notice_a_broken_unit(tmp_path: Path) -> None:
    result = verify(copies(tmp_path, edit="Type=simple\nExecStartPre=relative/path"))
    assert "relative/path" in result.stderr, "the checker finds mistakes (so the test above can fail)"


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_each_unit_is_hardened(unit: Path) -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(unit.read_text())
    service = parser["Service"]
    assert service["DynamicUser"] == "yes", "no fixed account, no root"
    assert service["NoNewPrivileges"] == "yes" and service["CapabilityBoundingSet"] == ""
    assert service["ProtectSystem"] == "strict" and service["ProtectHome"] == "yes"
    assert "EnvironmentFile" in service and "LoadCredential" in service, "settings in a file, secrets as credentials"
    assert "token" not in service["ExecStart"].split("--token-file")[0].lower(), "no secret on the command line"
    assert parser["Install"]["WantedBy"] == "multi-user.target"
