"""What each distribution ships. The base one (`pip install gpuscope`) is what every GPU node gets: the
exporter and what it imports, with neither the bench nor the hardware fakes nor the central services'
stack among its requirements. gpuscope-bench (packaging/bench) carries those two, from the same folders.

The wheels are built from a copy of the sources (an in-tree build reuses build/lib, where files of an
older package list linger), then the base one is installed into a fresh virtual environment with its
requirements from the package registry, and run there. Slow-ish (a minute or so, most of it pip): the
registry must answer in CI; elsewhere, when it cannot be reached, the install test is skipped."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
FOLDERS = PYPROJECT["tool"]["setuptools"]["package-dir"]  # import name -> folder

pytestmark = pytest.mark.timeout(600)  # building two wheels, then pip installing numpy and grpcio

# Never on a GPU node: the central services' stack, the bench's and the tests' own.
SERVER_STACK = {
    "fastapi", "uvicorn", "psycopg", "psycopg-pool", "dash", "plotly", "pydantic", "pydantic-settings",
    "prometheus-client", "httpx", "pyyaml", "kubernetes", "cramjam", "selenium", "pyarrow", "gunicorn",
}  # fmt: skip
# What the exporter does use: NVML's binding, numpy (sample arrays, the wire format), grpcio (the kubelet)
NODE_REQUIREMENTS = {"nvidia-ml-py", "numpy", "grpcio"}
BENCH_PREFIXES = ("gpuscope/bench/", "gpuscope/exporter/testing/")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two wheels, built as `pip wheel` builds them from a checkout."""
    source = tmp_path_factory.mktemp("source")
    junk = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.pyc")
    for name in ("pyproject.toml", "README.md", *(p.name for p in ROOT.glob("LICEN[CS]E*"))):
        shutil.copy2(ROOT / name, source / name)
    for folder in {*FOLDERS.values(), "packaging"}:
        shutil.copytree(ROOT / folder, source / folder, ignore=junk)
    # A checkout built before keeps that build's SOURCES.txt, naming the bench's files under gpuscope/;
    # setuptools reads it again, and took them as package data until include-package-data was turned off.
    stale = source / "gpuscope.egg-info"
    stale.mkdir()
    bench_files = (f"gpuscope/bench/{path.name}\n" for path in (ROOT / "gpuscope" / "bench").glob("*.py"))
    (stale / "SOURCES.txt").write_text("".join(bench_files))
    out = tmp_path_factory.mktemp("wheels")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out)]
    built = subprocess.run(
        [*command, str(source), str(source / "packaging" / "bench")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return {"gpuscope": _one(out, "gpuscope-*.whl"), "gpuscope-bench": _one(out, "gpuscope_bench-*.whl")}


def _one(folder: Path, pattern: str) -> Path:
    found = list(folder.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def _names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def _requirements(wheel: Path) -> tuple[set[str], set[str]]:
    """The distributions a wheel requires: always, and for some extra (normalised names)."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(archive.read(n) for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    always: set[str] = set()
    extras: set[str] = set()
    for line in metadata.decode().splitlines():
        if line.startswith("Requires-Dist:"):
            spec = line.removeprefix("Requires-Dist:").strip()
            name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", spec).group()).lower()  # type: ignore[union-attr]
            (extras if "extra ==" in spec else always).add(name)
    return always, extras


def _sources(folder: Path, skip: str | None = None) -> set[str]:
    """Every .py file under `folder`, relative to it, except those under `skip`."""
    found = {p.relative_to(folder).as_posix() for p in folder.rglob("*.py") if "__pycache__" not in p.parts}
    return {name for name in found if skip is None or not name.startswith(skip)}


def test_the_base_wheel_has_the_exporter_and_neither_the_bench_nor_the_fakes(wheels: dict[str, Path]) -> None:
    names = _names(wheels["gpuscope"])
    assert not [n for n in names if n.startswith(BENCH_PREFIXES)]
    exporter = {f"gpuscope/exporter/{name}" for name in _sources(ROOT / "exporter", skip="testing/")}
    composition = {"gpuscope/__init__.py", "gpuscope/cli.py", "gpuscope/exporter_process.py"}
    core = {f"gpuscope/core/{name}" for name in _sources(ROOT / "gpuscope" / "core")}
    data = {f"gpuscope/exporter/{p.name}" for p in (ROOT / "exporter").glob("*.csv")}
    assert exporter | composition | core | data <= names, sorted((exporter | composition | core | data) - names)


def test_the_base_wheel_requires_only_what_the_exporter_uses(wheels: dict[str, Path]) -> None:
    always, extras = _requirements(wheels["gpuscope"])
    assert always == NODE_REQUIREMENTS
    assert not always & SERVER_STACK
    assert "prometheus-client" in extras  # the collector's /metrics: in `server`


def test_the_bench_wheel_holds_the_bench_and_the_fakes_and_nothing_of_the_base(wheels: dict[str, Path]) -> None:
    names = _names(wheels["gpuscope-bench"])
    bench = {f"gpuscope/bench/{name}" for name in _sources(ROOT / "gpuscope" / "bench")}
    fakes = {f"gpuscope/exporter/testing/{name}" for name in _sources(ROOT / "exporter" / "testing")}
    assert "gpuscope/bench/workloads/__init__.py" in bench
    assert bench | fakes <= names, sorted((bench | fakes) - names)
    code = {n for n in names if ".dist-info/" not in n}
    # Any other file would be installed twice, by both distributions (gpuscope/__init__.py above all).
    assert {n for n in code if not n.startswith(BENCH_PREFIXES)} == set()
    always, _ = _requirements(wheels["gpuscope-bench"])
    assert {"gpuscope", "cramjam"} <= always
    bench_project = tomllib.loads((ROOT / "packaging" / "bench" / "pyproject.toml").read_text())["project"]
    # It pins the base distribution of its own version: the two are released together.
    assert f"gpuscope[server]=={PYPROJECT['project']['version']}" in bench_project["dependencies"]
    assert bench_project["version"] == PYPROJECT["project"]["version"]


def test_the_development_tree_still_imports_the_bench_and_the_fakes() -> None:
    import gpuscope.bench.workloads
    import gpuscope.exporter.testing.fake_nvml

    assert Path(gpuscope.bench.workloads.__file__).is_relative_to(ROOT / "gpuscope" / "bench")
    assert Path(gpuscope.exporter.testing.fake_nvml.__file__).is_relative_to(ROOT / "exporter" / "testing")


@pytest.fixture(scope="module")
def node(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the base wheel and its requirements, from the package registry:
    what a GPU node gets. Returns its bin folder."""
    venv = tmp_path_factory.mktemp("node") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
    installed = subprocess.run([*pip, str(wheels["gpuscope"])], capture_output=True, text=True, timeout=480)
    if installed.returncode != 0:
        if os.environ.get("CI") != "true" and _unreachable(installed.stdout + installed.stderr):
            pytest.skip("the package registry cannot be reached from here (CI requires it)")
        pytest.fail(f"pip install of the base wheel failed:\n{installed.stdout}{installed.stderr}")
    return venv / "bin"


def _unreachable(output: str) -> bool:
    signs = ("NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
             "Network is unreachable", "No matching distribution found", "Could not fetch URL")  # fmt: skip
    return any(sign in output for sign in signs)


def _run(bin_dir: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(bin_dir / command[0]), *command[1:]], capture_output=True, text=True, timeout=120, env=env, cwd="/"
    )


def test_a_node_install_lacks_the_server_stack(node: Path) -> None:
    check = "import importlib.util as u; print(' '.join(m for m in {!r} if u.find_spec(m)))".format(
        ["fastapi", "uvicorn", "psycopg", "dash", "plotly", "pydantic", "prometheus_client", "yaml", "httpx"]
    )
    found = _run(node, "python", "-c", check)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == ""


def test_a_node_install_imports_every_exporter_module(node: Path) -> None:
    """Each module of the exporter and its process, on an install without the server stack."""
    script = (
        "import importlib, pkgutil, gpuscope.exporter as e, gpuscope.exporter_process\n"
        "names = [m.name for m in pkgutil.walk_packages(e.__path__, 'gpuscope.exporter.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "print(' '.join(names))\n"
    )
    imported = _run(node, "python", "-c", script)
    assert imported.returncode == 0, imported.stderr
    files = _sources(ROOT / "exporter", skip="testing/")
    modules = {name.removesuffix(".py").removesuffix("/__init__") for name in files} - {"__init__"}
    expected = {"gpuscope.exporter." + name.replace("/", ".") for name in modules}
    assert expected <= set(imported.stdout.split()), sorted(expected - set(imported.stdout.split()))


def test_a_node_install_runs_the_exporter(node: Path) -> None:
    shown = _run(node, "gpuscope", "exporter", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "--backend" in shown.stdout and "--push" in shown.stdout

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    command = [str(node / "gpuscope"), "exporter", "--backend", "sim", "--jobs", "none"]
    with subprocess.Popen(
        [*command, "--listen", f"127.0.0.1:{port}", "--interval", "0.5"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd="/",
    ) as exporter:
        try:
            body = _scrape(f"http://127.0.0.1:{port}/metrics", exporter)
        finally:
            exporter.terminate()
            exporter.wait(10)
    assert "gpuscope_gpu_utilization_ratio{" in body


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(url: str, process: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = process.stderr.read() if process.stderr else ""
            pytest.fail(f"the exporter exited with {process.returncode}: {said}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                body = response.read().decode()
            if "gpuscope_gpu_utilization_ratio{" in body:
                return body
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail("the exporter served no metrics within 30 s")


def test_a_node_install_says_how_to_get_the_bench(node: Path) -> None:
    refused = _run(node, "gpuscope", "bench", "exporter")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert "gpuscope-bench" in lines[0] and "pip install ./packaging/bench" in lines[0]
