"""The driver's own verdict on a GPU: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (field 230), what NVIDIA says
must be done before the GPU is trusted again: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain
and reset, 5 recover the IMEX domain, 6 bus reset, 7 system reboot (nvmlDeviceGpuRecoveryAction_t).

It rides along in the cycle's one field-values call. A driver older than the field answers it in the
field's own status, NOT_SUPPORTED (or INVALID_ARGUMENT, an id it does not know): the value is then
absent, never 0 ("none" would say the driver checked and found nothing), and the field leaves the
request, as other unsupported readings are remembered; it is asked again every ASK_AGAIN_CYCLES cycles,
riding in a call made anyway. DCGM reads the same as DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION (field 1523); the
catalogue names no DCGM field for it, so the dcgm-compat exposition leaves it out.
"""

from __future__ import annotations

from types import ModuleType

from gpuscope.exporter.sources.nvml_fields import Fields

KEY = "recovery_action"
ASK_AGAIN_CYCLES = 360  # half an hour at the default 5 s interval


class RecoveryAction:
    """One GPU's recovery-action field: its request, and its value from the cycle's field results."""

    def __init__(self, nvml: ModuleType) -> None:
        self._nvml = nvml
        self._field: int | None = getattr(nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)  # None: old binding
        self._asked = self._field is not None
        self._cycles_left = 0  # while not asked: cycles until it is asked again

    def requests(self) -> list[tuple[int, int]]:
        return [(self._field, 0)] if self._asked and self._field is not None else []

    def take(self, fields: Fields, values: dict[str, float]) -> bool:
        """Fills the value; True when the field turned out unsupported (so the requests changed)."""
        if not self._asked or len(fields.status) == 0:
            return False
        nvml = self._nvml
        status = int(fields.status[0])
        if status == nvml.NVML_SUCCESS:
            values[KEY] = float(fields.value[0])
        elif status in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_INVALID_ARGUMENT):
            self._asked, self._cycles_left = False, ASK_AGAIN_CYCLES
            return True
        return False  # a passing failure: absent this cycle, asked again the next

    def ask_again(self) -> bool:
        """Called once a cycle: True when an unsupported field is due to be asked again (requests change)."""
        if self._asked or self._field is None:
            return False
        self._cycles_left -= 1
        if self._cycles_left > 0:
            return False
        self._asked = True
        return True
