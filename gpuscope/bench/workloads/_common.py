"""What every family draws the same way: the design of seeds, job length, fault windows, noise."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuscope.bench.workloads import TARGET_SLOWDOWNS
from gpuscope.bench.workloads._engine import calibrate
from gpuscope.bench.workloads._gpu import Fleet

BLOCK = 16  # every 16 consecutive seeds: 4 clean, 3 faulty at each target slowdown


def rng_for(family: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(family.encode()), seed])


def design(family: str, seed: int) -> float | None:
    """The target slowdown of this seed, None for a clean one. Balanced per block of 16 seeds, in an
    order shuffled per block so no seed pattern gives it away."""
    order = np.random.default_rng([zlib.crc32(family.encode()), 7919, seed // BLOCK]).permutation(BLOCK)
    slot = int(order[seed % BLOCK])
    if slot < 4:
        return None
    return TARGET_SLOWDOWNS[(slot - 4) // 3]


def draw_duration(rng: np.random.Generator) -> float:
    return float(60 * round(rng.uniform(3600, 10800) / 60))


def draw_window(rng: np.random.Generator, duration_s: float, earliest: float = 600.0) -> tuple[float, float]:
    """Fault onset at least `earliest` after the start, lasting 3-40 minutes, ending before the job."""
    length = float(rng.uniform(180, min(2400, duration_s - earliest - 120)))
    onset = float(rng.uniform(earliest, duration_s - length - 60))
    return onset, onset + length


def log_uniform_int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(np.clip(round(float(np.exp(rng.uniform(np.log(lo), np.log(hi + 0.999))))), lo, hi))


@dataclass
class Choice:
    kind: str
    where: tuple[int, ...]  # node, gpu / port, family-specific
    x: float  # calibrated intensity
    slowdown: float  # nominal slowdown at x
    mode: str = ""


def pick_fault(
    rng: np.random.Generator,
    target: float,
    weights: dict[str, float],
    locate: Callable[[str], tuple[int, ...]],
    slowdown_of: Callable[[str, tuple[int, ...], float, str], float],
    modes: Callable[[str], list[tuple[str, list[float] | None]]],
    tolerance: float = 0.25,
) -> Choice:
    """Draw a fault kind and place, then the intensity that brings the job's slowdown to the target.
    Discrete mechanisms (a link trained at a lower rate) are used only when one of their settings lands
    near the target; a kind or place that cannot reach it is redrawn (slow_host always can)."""
    kinds = list(weights)
    p = np.array([weights[k] for k in kinds], dtype=float)
    for attempt in range(8):
        kind = "slow_host" if attempt == 7 else str(rng.choice(kinds, p=p / p.sum()))
        where = locate(kind)
        for mode, settings in modes(kind):
            if settings is not None:  # discrete settings: take the closest, if close enough
                got = [(abs(np.log((slowdown_of(kind, where, x, mode) + 1e-9) / target)), x) for x in settings]
                err, x = min(got)
                if err < np.log(1 + tolerance):
                    return Choice(kind, where, x, slowdown_of(kind, where, x, mode), mode)
                continue
            x = calibrate(functools.partial(_at, slowdown_of, kind, where, mode), target)
            got_s = slowdown_of(kind, where, x, mode)
            if abs(got_s / target - 1) < tolerance:
                return Choice(kind, where, x, got_s, mode)
    raise RuntimeError("no fault reaches the target slowdown")


def _at(
    slowdown_of: Callable[[str, tuple[int, ...], float, str], float],
    kind: str,
    where: tuple[int, ...],
    mode: str,
    x: float,
) -> float:
    return slowdown_of(kind, where, x, mode)


def fleet_decoys(rng: np.random.Generator, fleet: Fleet) -> list[str]:
    """Oddities of a healthy fleet, each on 30% of jobs: a die a little slower at the same clock (its peers
    wait on it, no fault) and a GPU in a poorly ventilated slot that runs hotter without throttling."""
    decoys = []
    if rng.random() < 0.3:
        fleet.het[int(rng.integers(fleet.ranks))] *= rng.uniform(1.015, 1.03)
        decoys.append("slow_die")
    if rng.random() < 0.3:
        fleet.r_th[int(rng.integers(fleet.ranks))] *= 1.2
        decoys.append("hot_slot")
    return decoys


def noisy_port(rng: np.random.Generator, waits: np.ndarray, chance: float = 0.3) -> list[str]:
    """Now and then one port under an oversubscribed uplink: its baseline credit wait 8-15% (in place)."""
    if rng.random() < chance:
        waits[int(rng.integers(len(waits)))] = rng.uniform(0.08, 0.15)
        return ["noisy_port"]
    return []
