"""deploy/slurm/prolog.sh and epilog.sh run by hand, as slurmd runs them (no PATH, Slurm's variables
only), with a fake slurmd and nvidia-smi: gres.conf shapes a test Slurm does not need, and failures.
Needs root for the device files (mknod); test_attribution.py runs the same scripts under a real slurmd."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.slurm import fake_nvidia_smi
from tests.slurm.cluster import NVIDIA_MAJOR
from tests.slurm.fake_nvidia_smi import uuid_of
from tests.slurm.readme_install import DEPLOY

JOB = {
    "SLURM_JOB_ID": "4321",
    "SLURM_JOB_USER": "dana",
    "SLURM_JOB_ACCOUNT": "physics",
    "SLURM_JOB_PARTITION": "gpu",
    "SLURMD_NODENAME": "node7",
}


class Node:
    """tmp_path as a node's Slurm config directory: slurm.conf's place, gpuscope.conf, fake tools."""

    def __init__(self, root: Path, gres: list[str], minors: list[int]) -> None:
        if os.geteuid() != 0:
            pytest.skip("device files (mknod) need root")
        self.root, self.dev, self.bin, self.map = root, root / "dev", root / "bin", root / "map"
        self.dev.mkdir()
        for minor in minors:
            os.mknod(self.dev / f"nvidia{minor:02d}", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, minor))
        fake_nvidia_smi.install(self.bin, fake_nvidia_smi.gpus_in_nvml_order(sorted(minors, reverse=True)))
        self.slurmd("\n".join(f"slurmd: Gres {line.replace('DEV/', f'{self.dev}/')}" for line in gres))
        (root / "gpuscope.conf").write_text(f"map_dir={self.map}\npath={self.bin}\n")

    def slurmd(self, stderr: str, status: int = 0) -> None:
        """`slurmd -G` prints its GPU list on stderr, one "Gres Name=..." line per gres.conf record."""
        script = self.bin / "slurmd"
        script.write_text(f"#!/bin/sh\ncat >&2 <<'EOF'\n{stderr}\nEOF\nexit {status}\n")
        script.chmod(0o755)

    def run(self, script: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/bin/sh", str(DEPLOY / script)],
            env={**JOB, "SLURM_CONF": str(self.root / "slurm.conf"), **env},  # no PATH: Slurm gives none
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def files(self) -> dict[str, str]:
        return {p.name: p.read_text() for p in self.map.iterdir()} if self.map.is_dir() else {}


GRES = [  # Slurm's GPU index: 0 nvidia06, 1 nvidia07, 2 nvidia04, 3 nvidia09, 4 nvidia10
    "Name=gpu Type=a100 Count=2 Index=6 ID=7696487 File=DEV/nvidia[06-07] (null)",
    "Name=mps Type=(null) Count=200 Index=6 ID=7365744 File=DEV/nvidia[06-07] (null)",  # not a GPU
    "Name=gpu Type=h100 Count=3 Index=4 ID=7696487 File=DEV/nvidia04,DEV/nvidia[09-10] (null)",
]


def test_slurm_indices_are_positions_in_slurmds_gpu_list(tmp_path: Path) -> None:
    node = Node(tmp_path, GRES, [4, 6, 7, 9, 10])
    result = node.run("prolog.sh", SLURM_JOB_GPUS="1,3-4")
    assert result.returncode == 0, result.stderr
    line = "4321 dana account=physics partition=gpu\n"
    assert node.files() == {uuid_of(7): line, uuid_of(9): line, uuid_of(10): line}

    (node.map / uuid_of(4)).write_text("5555 erin\n")  # another job's GPU
    assert node.run("epilog.sh").returncode == 0
    assert node.files() == {uuid_of(4): "5555 erin\n"}, "only this job's files go"


def test_a_gpu_of_several_files_is_its_nvidia_device(tmp_path: Path) -> None:
    """gres.conf's MultipleFiles= (Slurm 23.02+): one GPU, listed with the other device files it needs."""
    node = Node(tmp_path, ["Name=gpu Type=a100 Count=1 ID=7696487 File=DEV/nvidia06,/dev/null (null)"], [6])
    assert node.run("prolog.sh", SLURM_JOB_GPUS="0").returncode == 0
    assert list(node.files()) == [uuid_of(6)]


def test_mig_devices_slurm_names_by_uuid_are_taken_as_named(tmp_path: Path) -> None:
    node = Node(tmp_path, [], [])
    result = node.run("prolog.sh", SLURM_JOB_GPUS="0,1", CUDA_VISIBLE_DEVICES="MIG-1a2b,MIG-3c4d")
    assert result.returncode == 0, result.stderr
    assert sorted(node.files()) == ["MIG-1a2b", "MIG-3c4d"]


@pytest.mark.parametrize(
    ("case", "gpus"),
    [
        ("index past slurmd's list", "5"),
        ("slurmd fails", "0"),
        ("nvidia-smi fails", "0"),
        ("nvidia-smi knows no such minor", "0"),
        ("not a device file", "0"),
    ],
)
def test_prolog_writes_nothing_rather_than_guess(tmp_path: Path, case: str, gpus: str) -> None:
    node = Node(tmp_path, GRES, [4, 6, 7, 9, 10])
    if case == "slurmd fails":
        node.slurmd("slurmd: fatal: Unable to find node record for node:node7", status=1)
    elif case == "nvidia-smi fails":
        (node.bin / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' ; exit 9\n")
    elif case == "nvidia-smi knows no such minor":
        fake_nvidia_smi.install(node.bin, fake_nvidia_smi.gpus_in_nvml_order([0, 1]))
    elif case == "not a device file":
        node.slurmd(f"slurmd: Gres Name=gpu Type=(null) Count=1 Index=6 ID=7696487 File={tmp_path}/gpuscope.conf")
    result = node.run("prolog.sh", SLURM_JOB_GPUS=gpus)
    assert result.returncode == 0, "a failing prolog drains the node"
    assert node.files() == {}
    assert "gpuscope-prolog: job 4321:" in result.stderr


def test_settings_reach_the_scripts_through_gpuscope_conf_only(tmp_path: Path) -> None:
    """A variable exported to slurmd never reaches a prolog; the old GPUSCOPE_SLURM_MAP_DIR is ignored."""
    node = Node(tmp_path, GRES, [4, 6, 7, 9, 10])
    assert node.run("prolog.sh", SLURM_JOB_GPUS="0", GPUSCOPE_SLURM_MAP_DIR=str(tmp_path / "x")).returncode == 0
    assert list(node.files()) == [uuid_of(6)]


def test_prolog_refuses_to_run_outside_slurm(tmp_path: Path) -> None:
    result = subprocess.run(
        ["/bin/sh", str(DEPLOY / "prolog.sh")], env={}, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode != 0 and "SLURM_JOB_ID is not set" in result.stderr
