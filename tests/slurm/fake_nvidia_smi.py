"""A fake nvidia-smi for scripts run by a test Slurm: the driver's view of fake GPUs.

It answers `nvidia-smi --query-gpu=FIELD,... --format=csv[,noheader][,nounits]` as the real one does
("0, GPU-5a0c8b2f-...", fields joined by ", "), for the fields index, minor_number, uuid, name and
pci.bus_id; an unknown field gets the real tool's message and exit status 2. Rows come in NVML's
order (`index`), which need not follow the minor numbers of /dev/nvidiaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuscope.exporter.snapshot import GpuIdentity

MODEL = "NVIDIA H100 80GB HBM3"


@dataclass(frozen=True)
class FakeGpu:
    index: int  # NVML's index: the exporter's
    minor: int  # /dev/nvidia<minor>: Slurm's File=

    @property
    def uuid(self) -> str:
        return uuid_of(self.minor)

    @property
    def pci_bus_id(self) -> str:
        return f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"

    def identity(self) -> GpuIdentity:
        """What the exporter's NVML backend reports for this GPU."""
        return GpuIdentity(self.index, self.uuid, MODEL, self.pci_bus_id)


def uuid_of(minor: int) -> str:
    return f"GPU-{0x5A0C8B00 + minor:08x}-1f2e-4d3c-8b7a-{minor:012x}"


def gpus_in_nvml_order(minors: list[int]) -> list[FakeGpu]:
    """minors[i] is the minor number of NVML's GPU i."""
    return [FakeGpu(index, minor) for index, minor in enumerate(minors)]


def install(bin_dir: Path, gpus: list[FakeGpu]) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    rows = "\n".join(f"{g.index}|{g.minor}|{g.uuid}|{MODEL}|{g.pci_bus_id}" for g in gpus)
    script = bin_dir / "nvidia-smi"
    script.write_text(SCRIPT.replace("@ROWS@", rows))
    script.chmod(0o755)
    return script


SCRIPT = r"""#!/bin/sh
# fake nvidia-smi (gpuscope tests): --query-gpu only
fields= header=yes
for arg; do
    case $arg in
    --query-gpu=*) fields=${arg#--query-gpu=} ;;
    --format=*noheader*) header=no ;;
    esac
done
[ -n "$fields" ] || { echo "fake nvidia-smi: only --query-gpu=... is supported" >&2; exit 2; }
awk -F'|' -v fields="$fields" -v header="$header" '
NR == 1 { for (i = 1; i <= NF; i++) column[$i] = i
          n = split(fields, want, ",")
          for (k = 1; k <= n; k++) if (!(want[k] in column)) {
              printf "Field \"%s\" is not a valid field to query.\n\n", want[k]; bad = 1; exit 2 }
          if (header == "yes") { line = want[1]; for (k = 2; k <= n; k++) line = line ", " want[k]; print line }
          next }
{ line = $column[want[1]]; for (k = 2; k <= n; k++) line = line ", " $column[want[k]]; print line }
' <<'EOF'
index|minor_number|uuid|name|pci.bus_id
@ROWS@
EOF
"""
