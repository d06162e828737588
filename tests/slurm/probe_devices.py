"""Run inside a job: prints the minor numbers of the fake GPUs (DIR/nvidiaN) this job may open.

With ConstrainDevices=yes, Slurm's device cgroup refuses a job the GPUs it was not given: open() fails
with EPERM. A fake device has no driver behind it, so an open() Slurm allows fails with ENXIO instead
(or succeeds, on a host with a real GPU at that minor): the devices Slurm actually gave the job.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path


def may_open(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError as exc:
        return exc.errno != errno.EPERM
    return True


if __name__ == "__main__":
    devices = Path(sys.argv[1]).glob("nvidia*")
    print(" ".join(str(m) for m in sorted(int(p.name.removeprefix("nvidia")) for p in devices if may_open(p))))
