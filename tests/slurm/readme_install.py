"""Installs deploy/slurm's scripts on a SlurmCluster exactly as deploy/slurm/README.md says.

The README's code blocks are followed as written, with /etc/slurm/ moved into the cluster's directory:
its `install -m MODE SRC DEST` lines copy the scripts, the block headed `# /etc/slurm/slurm.conf` gives
slurm.conf keys, and the block headed `# /etc/slurm/gpuscope.conf` is written beside the cluster's
slurm.conf, with its map_dir and path values set for the test.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent.parent.parent / "deploy" / "slurm"
README = DEPLOY / "README.md"
ETC = "/etc/slurm/"
CODE_BLOCK = re.compile(r"^ *```[^\n]*\n(.*?)^ *```", re.S | re.M)


@dataclass(frozen=True)
class Installed:
    settings: dict[str, str]  # slurm.conf keys, for SlurmCluster(settings=...) or reconfigure()
    config: Path  # the gpuscope.conf written


def install(root: Path, map_dir: Path, tools_dir: Path) -> Installed:
    """The scripts into `root` (the cluster's directory, which holds its slurm.conf). `tools_dir`: the
    README's `path=` value, a directory with the test's nvidia-smi, as an admin's would hold theirs."""
    blocks = [_dedent(block) for block in CODE_BLOCK.findall(README.read_text())]
    installs = [line.split() for block in blocks for line in block if line.startswith("install ")]
    assert installs, "README.md says how to install the scripts (`install -m 755 SRC DEST`)"
    for _, _, mode, source, dest in installs:
        target = _relocate(dest, root)
        shutil.copy(DEPLOY / source, target)
        target.chmod(int(mode, 8))
    settings = _key_values(_block_for(blocks, "slurm.conf"))
    settings = {key: value.replace(ETC, f"{root}/") for key, value in settings.items()}
    lines = _block_for(blocks, "gpuscope.conf")
    values = {"map_dir": str(map_dir), "path": str(tools_dir)}
    assert set(_key_values(lines)) >= set(values), "README.md's gpuscope.conf shows map_dir= and path="
    config = _relocate(ETC + "gpuscope.conf", root)
    config.write_text("".join(_with_values(line, values) + "\n" for line in lines))
    return Installed(settings, config)


def _key_values(lines: list[str]) -> dict[str, str]:
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def _with_values(line: str, values: dict[str, str]) -> str:
    key = line.split("=", 1)[0]
    return f"{key}={values[key]}" if "=" in line and key in values else line


def _block_for(blocks: list[list[str]], name: str) -> list[str]:
    for block in blocks:
        if block and block[0].strip() == f"# {ETC}{name}":
            return block[1:]
    raise AssertionError(f"README.md has no code block headed '# {ETC}{name}'")


def _relocate(path: str, root: Path) -> Path:
    assert path.startswith(ETC), f"README.md installs into {ETC}, not {path}"
    return root / path.removeprefix(ETC)


def _dedent(block: str) -> list[str]:
    return [line.strip() for line in block.splitlines()]
