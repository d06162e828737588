"""The container image installs the project from the folders it copies: each folder pyproject.toml maps
to an installed name must be copied, or `pip install .` fails inside the build (it did, for three)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_image_copies_every_folder_the_distribution_installs() -> None:
    folders = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
    dockerfile = (ROOT / "deploy" / "container" / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\S+) \1$", dockerfile, flags=re.MULTILINE))
    assert folders <= copied, f"not copied into the image: {sorted(folders - copied)}"
