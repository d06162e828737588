"""Alert rules shared by the tests that run a real engine: evaluated every second, so alerts fire
within seconds of the condition."""

from __future__ import annotations

_GPU_OVER_TEMPERATURE = """
groups:
  - name: gpu
    interval: 1s
    rules:
      - alert: GpuOverTemperature
        expr: SELECT cluster, node, gpu, uuid, temp_c AS value FROM gpu_latest WHERE temp_c >= 85
        labels: {severity: warning}
        annotations:
          summary: "GPU {{ $labels.gpu }} on {{ $labels.node }} is at {{ $value }} C"
"""


def gpu_over_temperature(for_: str | None = None) -> str:
    """The shipped GpuOverTemperature (a GPU at 85 C or more), firing at once, or after `for_` (e.g. "3s")."""
    if for_ is None:
        return _GPU_OVER_TEMPERATURE
    return _GPU_OVER_TEMPERATURE.replace("        labels:", f"        for: {for_}\n        labels:")


# Any GPU at 85 C or more, with nothing else to it: for tests of the engine's leading and delivery.
HOT = """
groups:
  - name: g
    interval: 1s
    rules:
      - alert: Hot
        expr: SELECT node, gpu, temp_c AS value FROM gpu_latest WHERE temp_c >= 85
"""
