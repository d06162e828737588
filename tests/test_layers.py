"""The house's floors: every package is installed under `gpuscope.`, and import-linter's contracts
(pyproject.toml, run by `make lint`) hold for the tree as it is and fail for a wrong import."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
FOLDERS = PYPROJECT["tool"]["setuptools"]["package-dir"]  # import name -> folder
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
# The bench and the hardware fakes are a second distribution of the same tree (tests/test_packaging.py).
BENCH = tomllib.loads((ROOT / "packaging" / "bench" / "pyproject.toml").read_text())


def _packages_on_disk() -> set[str]:
    found = set()
    for name, folder in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *relative)))
    return found


def test_every_package_on_disk_is_installed_under_gpuscope() -> None:
    base = set(PYPROJECT["tool"]["setuptools"]["packages"])
    bench = set(BENCH["tool"]["setuptools"]["packages"])
    assert not base & bench, base & bench  # each package in one distribution only
    declared = base | bench
    code = _packages_on_disk()
    assert code <= declared, code - declared
    # The rest are folders of data only (SQL, CSS), declared so that setuptools installs them quietly.
    data_only = declared - code
    assert data_only <= set(PYPROJECT["tool"]["setuptools"]["package-data"]), data_only
    assert all(name == "gpuscope" or name.startswith("gpuscope.") for name in FOLDERS)


def _importable_tree(target: Path) -> Path:
    """Files linked one by one under their installed names (as the Makefile's tree, but writable)."""
    for name, folder in FOLDERS.items():
        base = target.joinpath(*name.split("."))
        for dirpath, dirnames, filenames in os.walk(ROOT / folder):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            here = base / Path(dirpath).relative_to(ROOT / folder)
            here.mkdir(parents=True, exist_ok=True)
            for filename in filenames:
                if filename.endswith(".py") and not (here / filename).exists():
                    (here / filename).symlink_to(Path(dirpath) / filename)
    return target


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.fail("lint-imports is missing: install the dev extra (make test does)")
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_layers_hold_and_a_wrong_import_breaks_them(tmp_path: Path) -> None:
    tree = _importable_tree(tmp_path)
    kept = _lint(tree)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "0 broken" in kept.stdout

    # The exporter reaching up into the collector: both the layers and the exporter's own contract object.
    (tree / "gpuscope" / "exporter" / "wrong.py").write_text("from gpuscope.collector.main import create_app\n")
    # The collector core reaching into an extension, as it did before the parts.
    (tree / "gpuscope" / "collector" / "wrong.py").write_text("from gpuscope.alerts.engine import AlertEngine\n")
    # A server package borrowing the exporter's words: they belong in core (gpuscope/core/gpu_events.py).
    (tree / "gpuscope" / "health" / "wrong.py").write_text("from gpuscope.exporter.events import XID\n")
    broken = _lint(tree)
    assert broken.returncode == 1, broken.stdout
    assert "gpuscope.exporter.wrong -> gpuscope.collector.main" in broken.stdout
    assert "gpuscope.collector.wrong -> gpuscope.alerts.engine" in broken.stdout
    assert "the exporter runs on every GPU node" in broken.stdout and "BROKEN" in broken.stdout
    assert "gpuscope.health.wrong -> gpuscope.exporter.events" in broken.stdout
    assert "never import the exporter: the words both use live in core" in broken.stdout
