"""Printing a benchmark's figures: a readable table, and with --json one JSON object on the last line."""

from __future__ import annotations

import json
import os
import platform
from typing import Any


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model)
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def emit(name: str, figures: dict[str, Any], as_json: bool) -> None:
    figures = {"bench": name, **figures, "machine": machine()}
    width = max(len(key) for key in figures)
    for key, value in figures.items():
        if key != "machine":
            print(f"{key:<{width}}  {value}")
    print(f"{'machine':<{width}}  {figures['machine']}")
    if as_json:
        print(json.dumps(figures, separators=(",", ":")))
