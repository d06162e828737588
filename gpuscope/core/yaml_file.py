"""Reading an operator's YAML file: the document, or an error that names the file and what it was for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_yaml(path: Path, what: str, error: type[Exception]) -> Any:
    """The document in `path` ({} for an empty file); `error` saying "cannot read the <what>" when the
    file cannot be read or is not YAML."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise error(f"{path}: cannot read the {what}: {exc}") from exc
